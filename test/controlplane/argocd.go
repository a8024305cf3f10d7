package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// Argo CD on the plane: its application controller and repo server run out
// of cluster, as Flux's controllers do, the way Argo CD's own Procfile runs
// them locally (ARGOCD_FAKE_IN_CLUSTER: the in-cluster destination
// https://kubernetes.default.svc is the kubeconfig's cluster). What a real
// install gives them comes from Argo CD's own core-install.yaml: CRDs,
// ServiceAccounts, RBAC, ConfigMaps and the Secret; its Deployments,
// Services and NetworkPolicies are what runs here as processes instead.

const (
	// ArgoCDNamespace is where Argo CD's objects live, as in a real install.
	ArgoCDNamespace = "argocd"
	// UserArgoCDController is the user Argo CD's application controller
	// acts as: its service account's, bound by Argo CD's own RBAC.
	UserArgoCDController = "system:serviceaccount:" + ArgoCDNamespace + ":argocd-application-controller"
)

// argoCDSkipped are the kinds of core-install.yaml that run here as
// processes, or guard pods that do not exist.
var argoCDSkipped = map[string]bool{"Deployment": true, "StatefulSet": true, "Service": true, "NetworkPolicy": true}

// argoCDSettings are what the plane sets in argocd-cm beyond Argo CD's
// defaults. Annotation tracking is Argo CD 3's default; with 2.x's label
// tracking Argo CD writes app.kubernetes.io/instance onto every object it
// syncs, which a person's next edit would carry into the user's files
// (docs/appliers.md).
var argoCDSettings = map[string]any{"application.resourceTrackingMethod": "annotation"}

// argoCDDefaultProject is the project Argo CD's API server creates on its
// first start (it does not run here): any repository, any destination.
const argoCDDefaultProject = `apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: default, namespace: ` + ArgoCDNamespace + `}
spec:
  sourceRepos: ['*']
  destinations: [{namespace: '*', server: '*'}]
  clusterResourceWhitelist: [{group: '*', kind: '*'}]
`

// startArgoCD installs what Argo CD's core install gives its controllers,
// then starts Redis, the repo server and the application controller, and
// waits until each is ready.
func startArgoCD(ctx context.Context, env *Env, o Options, p ports) error {
	install, err := argoCDInstall(filepath.Join(o.ArgoCDBin, "core-install.yaml"))
	if err != nil {
		return err
	}
	if err := kubectlApply(ctx, env.KubeconfigAdmin, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ArgoCDNamespace+"}\n---\n"+install); err != nil {
		return fmt.Errorf("installing Argo CD's core manifests: %w", err)
	}
	if err := waitCRDs(ctx, env.KubeconfigAdmin); err != nil {
		return err
	}
	if err := kubectlApply(ctx, env.KubeconfigAdmin, argoCDDefaultProject); err != nil {
		return fmt.Errorf("configuring Argo CD: %w", err)
	}

	state := filepath.Join(env.Dir, "argocd")
	procEnv := []string{"ARGOCD_FAKE_IN_CLUSTER=true", "KUBECONFIG=" + env.KubeconfigArgoCD, "ARGOCD_GPG_ENABLED=false",
		"TMPDIR=" + filepath.Join(state, "tmp")}
	for _, d := range []struct{ env, dir string }{{"ARGOCD_TLS_DATA_PATH", "tls"}, {"ARGOCD_SSH_DATA_PATH", "ssh"}, {"ARGOCD_GNUPGHOME", "gpg"}, {"", "tmp"}} {
		if err := os.MkdirAll(filepath.Join(state, d.dir), 0o700); err != nil {
			return err
		}
		if d.env != "" {
			procEnv = append(procEnv, d.env+"="+filepath.Join(state, d.dir))
		}
	}
	redis := fmt.Sprintf("127.0.0.1:%d", p.argoRedis)
	check, err := startProcess(env.Dir, env.LogDir, "argocd-redis", filepath.Join(o.ReverserBin, "reverser-redis"), "--listen="+redis)
	if err != nil {
		return err
	}
	if err := waitTCP(ctx, check, redis); err != nil {
		return err
	}
	for _, c := range []struct {
		name    string
		metrics int
		args    []string
	}{
		{"argocd-repo-server", p.argoRepoMetrics, []string{"--address=127.0.0.1", fmt.Sprintf("--port=%d", p.argoRepo),
			"--metrics-address=127.0.0.1", fmt.Sprintf("--metrics-port=%d", p.argoRepoMetrics), "--disable-tls"}},
		{"argocd-application-controller", p.argoControllerMetrics, []string{"--kubeconfig=" + env.KubeconfigArgoCD,
			"--namespace=" + ArgoCDNamespace, fmt.Sprintf("--repo-server=127.0.0.1:%d", p.argoRepo), "--repo-server-plaintext",
			fmt.Sprintf("--metrics-port=%d", p.argoControllerMetrics)}},
	} {
		args := append([]string{"--redis=" + redis, "--loglevel=info"}, c.args...)
		check, err := startProcessEnv(env.Dir, env.LogDir, c.name, filepath.Join(o.ArgoCDBin, c.name), procEnv, args...)
		if err != nil {
			return err
		}
		if err := waitHTTP(ctx, check, c.name, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.metrics), plainClient(false), true); err != nil {
			return err
		}
	}
	return nil
}

// argoCDInstall is core-install.yaml without what runs here as processes,
// its namespaced objects put into ArgoCDNamespace (the file leaves that to
// `kubectl apply -n`).
func argoCDInstall(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading Argo CD's install manifest (run hack/build-argocd.sh): %w", err)
	}
	var out bytes.Buffer
	decoder := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var doc map[string]any
		if err := decoder.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		kind, _ := doc["kind"].(string)
		if doc == nil || argoCDSkipped[kind] {
			continue
		}
		md, _ := doc["metadata"].(map[string]any)
		if md != nil && !clusterScoped[kind] {
			md["namespace"] = ArgoCDNamespace
		}
		switch {
		case md == nil:
		case kind == "ConfigMap" && md["name"] == "argocd-cm":
			doc["data"] = argoCDSettings
		case kind == "Secret" && md["name"] == "argocd-secret":
			// The key Argo CD's API server generates on its first start.
			doc["stringData"] = map[string]any{"server.secretkey": randomToken()}
		}
		b, err := sigsyaml.Marshal(doc)
		if err != nil {
			return "", err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return out.String(), nil
}

// clusterScoped are the kinds core-install.yaml holds that have no namespace.
var clusterScoped = map[string]bool{"CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true}
