package document

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

func parse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(doc), &m))
	return &unstructured.Unstructured{Object: m}
}

var configmaps = schema.GroupResource{Resource: "configmaps"}

func TestSanitize(t *testing.T) {
	live := parse(t, `
apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: demo
  uid: 1234
  resourceVersion: "99"
  generation: 3
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields: [{manager: kubectl}]
  ownerReferences: [{uid: x}]
  labels: {team: a, kustomize.toolkit.fluxcd.io/name: apps}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    note: kept
data: {b: "2", a: "1"}
status: {phase: whatever}
`)
	got, err := Sanitize(configmaps, live)
	require.NoError(t, err)
	assert.Equal(t, `apiVersion: v1
kind: ConfigMap
metadata:
  annotations:
    note: kept
  labels:
    team: a
  name: app
  namespace: demo
data:
  a: "1"
  b: "2"
`, string(got))
	assert.Equal(t, "99", live.GetResourceVersion(), "the live object is not modified")
}

func TestSanitizeIgnoresRuntimeChurn(t *testing.T) {
	a := parse(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, resourceVersion: '1', annotations: {kubectl.kubernetes.io/last-applied-configuration: a}}\ndata: {k: v}\n")
	b := parse(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, resourceVersion: '2', managedFields: []}\ndata: {k: v}\nstatus: {x: 1}\n")
	da, err := Sanitize(configmaps, a)
	require.NoError(t, err)
	db, err := Sanitize(configmaps, b)
	require.NoError(t, err)
	assert.Equal(t, string(da), string(db))
}

func TestSanitizePerType(t *testing.T) {
	svc := parse(t, "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.0.0.7, clusterIPs: [10.0.0.7], ports: [{port: 80}]}\n")
	got, err := Sanitize(schema.GroupResource{Resource: "services"}, svc)
	require.NoError(t, err)
	assert.Equal(t, "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - port: 80\n", string(got))
}

func TestDocumentPath(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deploy := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	roles := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	assert.Equal(t, "clusters/dev/demo/configmaps/app.yaml", DocumentPath("clusters/dev", cm, "demo", "app"))
	assert.Equal(t, "clusters/dev/demo/apps/deployments/web.yaml", DocumentPath("clusters/dev", deploy, "demo", "web"))
	assert.Equal(t, "clusters/dev/_cluster/rbac.authorization.k8s.io/clusterroles/view.yaml", DocumentPath("clusters/dev", roles, "", "view"))
	assert.Equal(t, "demo/configmaps/app.yaml", DocumentPath("", cm, "demo", "app"))

	assert.True(t, InScope("clusters/dev/demo/configmaps/app.yaml", "clusters/dev", cm, "demo"))
	assert.True(t, InScope("clusters/dev/other/configmaps/app.yaml", "clusters/dev", cm, "*"))
	assert.False(t, InScope("clusters/dev/other/configmaps/app.yaml", "clusters/dev", cm, "demo"))
	assert.False(t, InScope("clusters/dev/demo/configmaps/README.md", "clusters/dev", cm, "demo"))
	assert.False(t, InScope("clusters/dev/demo/apps/deployments/web.yaml", "clusters/dev", cm, "demo"))
	assert.True(t, InScope("clusters/dev/demo/apps/deployments/web.yaml", "clusters/dev", deploy, "*"))
	assert.False(t, InScope("clusters/dev/_cluster/configmaps/x.yaml", "clusters/dev", cm, "*"))
	assert.True(t, InScope("_cluster/rbac.authorization.k8s.io/clusterroles/view.yaml", "", roles, ""))
	assert.False(t, InScope("clusters/devx/demo/configmaps/app.yaml", "clusters/dev", cm, "demo"))
}

func TestSkip(t *testing.T) {
	root := parse(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kube-root-ca.crt, namespace: demo}\n")
	out, skip := Skip(configmaps, root, SealSecrets)
	assert.True(t, skip)
	assert.Equal(t, OutcomeClusterGenerated, out)
	secret := parse(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
	out, skip = Skip(schema.GroupResource{Resource: "secrets"}, secret, SkipSecrets)
	assert.True(t, skip)
	assert.Equal(t, OutcomeSecretSkipped, out)
	_, skip = Skip(schema.GroupResource{Resource: "secrets"}, secret, SealSecrets)
	assert.False(t, skip, "handed on to be sealed")
	token := parse(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/service-account-token\n")
	out, skip = Skip(schema.GroupResource{Resource: "secrets"}, token, SealSecrets)
	assert.True(t, skip, "a token the cluster issued is valid in that cluster only")
	assert.Equal(t, OutcomeClusterGenerated, out)
	_, skip = Skip(configmaps, parse(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n"), SkipSecrets)
	assert.False(t, skip)
	assert.False(t, Mirrorable(schema.GroupResource{Group: "reverser.dev", Resource: "commitrequests"}))
	assert.False(t, Mirrorable(schema.GroupResource{Resource: "events"}))
	assert.True(t, Mirrorable(configmaps))
}

// The digest an applier puts on a sealed Secret is not part of it.
func TestSanitizeDropsTheSealedDigest(t *testing.T) {
	doc, err := Sanitize(SecretsResource, parse(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: s, annotations: {"+
		v1.SOPSDigestAnnotation+": 'hmac-sha256:00'}}\ndata: {k: dg==}\n"))
	require.NoError(t, err)
	assert.Equal(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ndata:\n  k: dg==\n", string(doc))
}
