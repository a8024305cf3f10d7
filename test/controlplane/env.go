// Package controlplane starts and stops the local control plane that `make
// up`, `make demo` and the end-to-end tests share: etcd, kube-apiserver and
// kube-controller-manager built from source, reverser-apiserver registered
// through an APIService, and a Git server, all on loopback with their state
// under one directory.
package controlplane

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
)

// Env says where everything of a running control plane is. It is written to
// <dir>/env.json and, for shells, <dir>/env as export lines.
type Env struct {
	Dir              string `env:"REVERSER_LOCAL_DIR"`
	LogDir           string `env:"REVERSER_LOG_DIR"`
	KubeAPIServerURL string `env:"KUBE_APISERVER_URL"`
	KubeconfigAdmin  string `env:"KUBECONFIG_ADMIN"`
	KubeconfigAlice  string `env:"KUBECONFIG_ALICE"`
	KubeconfigBob    string `env:"KUBECONFIG_BOB"`
	KubeconfigServer string `env:"KUBECONFIG_REVERSER_APISERVER"`
	KubeconfigCtrl   string `env:"KUBECONFIG_REVERSER_CONTROLLER"`
	// Flux's controllers' credentials, and where source-controller serves
	// artifacts (empty without Options.FluxBin).
	KubeconfigFluxSource    string `env:"KUBECONFIG_FLUX_SOURCE"`
	KubeconfigFluxKustomize string `env:"KUBECONFIG_FLUX_KUSTOMIZE"`
	FluxStorageURL          string `env:"FLUX_STORAGE_URL"`
	// Argo CD's application controller's credentials (unused without
	// Options.ArgoCDBin).
	KubeconfigArgoCD string `env:"KUBECONFIG_ARGOCD"`
	MetricsURL       string `env:"REVERSER_METRICS_URL"`
	// PprofURL is reverser-controller's /debug/pprof (one controller only).
	PprofURL          string `env:"REVERSER_PPROF_URL"`
	ReverserAPIServer string `env:"REVERSER_APISERVER_URL"`
	GitBaseURL        string `env:"GIT_BASE_URL"`
	GitRoot           string `env:"GIT_ROOT"`
	AuditWebhookURL   string `env:"AUDIT_WEBHOOK_URL"`
	// The etcd of kube-apiserver (its first member, with Options.HA; all
	// of them in KubeEtcdServers). Not named ETCD_*: etcd reads those as flags.
	KubeEtcdURL     string `env:"KUBE_ETCD_URL"`
	KubeEtcdServers string `env:"KUBE_ETCD_SERVERS"`
	// ReverserAPIServerReplicas, with Options.HA, are the replicas' URLs,
	// comma-separated; ReverserAPIServer is their balancer.
	ReverserAPIServerReplicas string `env:"REVERSER_APISERVER_REPLICAS"`
	// BlackholeControl, with Options.ControllerBlackhole, is the file that
	// stalls the controller's connections to kube-apiserver.
	BlackholeControl string `env:"REVERSER_BLACKHOLE_CONTROL"`
	// AuditSkewControl, with Options.AuditRelay, is the file naming the
	// skew of the audit events' timestamps (a duration, "1h" or "-1h").
	AuditSkewControl string `env:"REVERSER_AUDIT_SKEW_CONTROL"`
	// ControllerDataDir is reverser-controller's --data-dir.
	ControllerDataDir string `env:"REVERSER_CONTROLLER_DATA_DIR"`
}

func (e *Env) write() error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.Dir, "env.json"), data, 0o644); err != nil {
		return fmt.Errorf("writing env.json: %w", err)
	}
	var lines []string
	v := reflect.ValueOf(*e)
	for i := 0; i < v.NumField(); i++ {
		lines = append(lines, fmt.Sprintf("export %s=%q", v.Type().Field(i).Tag.Get("env"), v.Field(i).String()))
	}
	sort.Strings(lines)
	lines = append(lines, `export KUBECONFIG="$KUBECONFIG_ADMIN"`)
	return os.WriteFile(filepath.Join(e.Dir, "env"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// Load reads the Env of the control plane whose state is in dir.
func Load(dir string) (*Env, error) {
	data, err := os.ReadFile(filepath.Join(dir, "env.json"))
	if err != nil {
		return nil, err
	}
	var e Env
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("reading %s/env.json: %w", dir, err)
	}
	return &e, nil
}
