package artifacts

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var auditFlagRE = regexp.MustCompile(`--audit-[a-z-]+(=[^\s\x60,]+)?`)

// The webhook kubeconfig's header names every kube-apiserver flag step 3 of
// docs/install.md sets (#29): it named no --audit-webhook-batch-max-wait,
// and kube-apiserver's default of 30s held every attributed edit that long.
func TestWebhookKubeconfigNamesTheInstallGuidesFlags(t *testing.T) {
	guide, err := os.ReadFile("../docs/install.md")
	require.NoError(t, err)
	_, step, ok := strings.Cut(string(guide), "## 3. Audit events to the leader")
	require.True(t, ok, "docs/install.md has no step 3")
	step, _, _ = strings.Cut(step, "\n## ")
	start, _, ok := strings.Cut(step, "An attributed edit")
	require.True(t, ok)
	want := auditFlagRE.FindAllString(start, -1)
	require.Contains(t, want, "--audit-webhook-batch-max-wait=1s")

	header, err := os.ReadFile("deploy/audit/webhook-kubeconfig.yaml")
	require.NoError(t, err)
	var comments []string
	for _, line := range strings.Split(string(header), "\n") {
		if strings.HasPrefix(line, "#") {
			comments = append(comments, line)
		}
	}
	have := auditFlagRE.FindAllString(strings.Join(comments, "\n"), -1)
	for _, f := range want {
		name, _, _ := strings.Cut(f, "=")
		assert.True(t, slices.Contains(have, f) || (f == name && slices.ContainsFunc(have, func(h string) bool { return strings.HasPrefix(h, name+"=") })),
			"webhook-kubeconfig.yaml's header lacks %s (it names %v)", f, have)
	}
}
