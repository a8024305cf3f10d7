package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClusterBehavesLikeOne: kube-controller-manager runs, so namespaces
// finish deleting and Deployments get status, as on a real cluster; the
// mirror must cope with that churn.
func TestClusterBehavesLikeOne(t *testing.T) {
	ns := uniqueName("lifecycle")
	kubectlOK(t, admin, "", "create", "namespace", ns)
	createDeployment(t, ns)
	waitDeploymentStatus(t, ns)
	kubectlOK(t, admin, "", "delete", "namespace", ns, "--wait=false")
	eventually(t, 90*time.Second, "the namespace finishes deleting", func() (bool, error) {
		_, err := kubectl(admin, "", "get", "namespace", ns)
		return err != nil && strings.Contains(err.Error(), "NotFound"), nil
	})
	_, err := kubectl(admin, "", "get", "replicasets", "-n", ns, "-o", "name")
	require.NoError(t, err, "listing in a deleted namespace answers, with nothing")
}

// createDeployment creates Deployment web; its image is never pulled, since
// the local cluster has no nodes.
func createDeployment(t *testing.T, ns string) {
	t.Helper()
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %s}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: example.invalid/web:1}]
`, ns), "apply", "--server-side", "-f", "-")
}

// waitDeploymentStatus waits until kube-controller-manager has written the
// Deployment's status.
func waitDeploymentStatus(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 60*time.Second, "the deployment controller writes status", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "deployment", "-n", ns, "web", "-o", "jsonpath={.status.observedGeneration}")
		return strings.TrimSpace(out) == "1", err
	})
}
