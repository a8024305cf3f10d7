package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/test/controlplane"
)

// fluxSync creates, in flux-system, a GitRepository on url's branch main and
// a Kustomization applying its folder path into namespace ns, both at a 24h
// interval as a claimed applier has them, and returns the Kustomization's
// name.
func fluxSync(t *testing.T, url, path, ns string) string {
	t.Helper()
	name := uniqueName("apps")
	kubectlOK(t, controlplane.UserAdmin, fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  url: %[3]s
  ref: {branch: main}
  interval: 24h
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  sourceRef: {kind: GitRepository, name: %[1]s}
  path: %[4]s
  targetNamespace: %[5]s
  prune: true
  interval: 24h
`, name, controlplane.FluxNamespace, url, path, ns), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(controlplane.UserAdmin, "", "delete", "-n", controlplane.FluxNamespace, "kustomization,gitrepository", name, "--wait=false")
	})
	return name
}

// TestFluxAppliesFromTheLocalGitServer: the control plane runs the real
// Flux controllers, which fetch from the local Git server and apply what
// they find, as the applier tests need.
func TestFluxAppliesFromTheLocalGitServer(t *testing.T) {
	ns := namespace(t, "flux")
	url := createRepo(t, "flux")
	work := filepath.Join(t.TempDir(), "work")
	git(t, filepath.Dir(work), "clone", "--quiet", url, work)
	require.NoError(t, os.MkdirAll(filepath.Join(work, "apps"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(work, "apps", "app.yaml"), []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: app}
data: {color: blue}
`), 0o644))
	git(t, work, "add", "-A")
	git(t, work, "commit", "--quiet", "-m", "The app")
	git(t, work, "push", "--quiet", "origin", "HEAD:main")
	sha := git(t, work, "rev-parse", "HEAD")

	name := fluxSync(t, url, "./apps", ns)
	eventually(t, 2*time.Minute, "Flux applied the commit", func() (bool, error) {
		out, err := kubectl(controlplane.UserAdmin, "", "get", "kustomization", "-n", controlplane.FluxNamespace, name,
			"-o", "jsonpath={.status.lastAppliedRevision}")
		return strings.HasSuffix(strings.TrimSpace(out), sha), err
	})
	out := kubectlOK(t, controlplane.UserAdmin, "", "get", "configmap", "-n", ns, "app", "-o", "jsonpath={.data.color}")
	require.Equal(t, "blue", out)
	managers := kubectlOK(t, controlplane.UserAdmin, "", "get", "configmap", "-n", ns, "app", "--show-managed-fields",
		"-o", "jsonpath={.metadata.managedFields[*].manager}")
	require.Contains(t, managers, "kustomize-controller", "applied by Flux, as Flux")
}
