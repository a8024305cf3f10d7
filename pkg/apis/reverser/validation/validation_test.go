package validation

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
)

// fields lists the paths an error list names.
func fields(errs field.ErrorList) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, e.Field)
	}
	return out
}

func validTarget() reverser.GitTargetSpec {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	return reverser.GitTargetSpec{
		KubeProviderRef: reverser.LocalObjectReference{Name: "local"},
		GitProviderRef:  reverser.LocalObjectReference{Name: "repo"},
		Branch:          "main",
		Path:            "clusters/dev",
		Commit:          reverser.CommitSpec{Window: reverser.CommitWindow{Silence: d(5 * time.Second), MaxAge: d(time.Minute)}},
		Prune:           reverser.PruneAlways,
		AllowedCommitRequests: []reverser.CommitRequestGrant{
			{ConsumerNamespaces: &reverser.NamespaceSelection{From: reverser.NamespacesFromSame}}},
	}
}

func TestValidateGitTargetSpec(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*reverser.GitTargetSpec)
		want []string
	}{
		{"valid", func(*reverser.GitTargetSpec) {}, []string{}},
		{"root path", func(s *reverser.GitTargetSpec) { s.Path = "" }, []string{}},
		{"nested branch", func(s *reverser.GitTargetSpec) { s.Branch = "env/prod" }, []string{}},
		{"absolute path", func(s *reverser.GitTargetSpec) { s.Path = "/x" }, []string{"spec.path"}},
		{"parent path", func(s *reverser.GitTargetSpec) { s.Path = "x/.." }, []string{"spec.path"}},
		{"git folder", func(s *reverser.GitTargetSpec) { s.Path = "a/.git/hooks" }, []string{"spec.path"}},
		{"backslash path", func(s *reverser.GitTargetSpec) { s.Path = `a\b` }, []string{"spec.path"}},
		{"empty segment", func(s *reverser.GitTargetSpec) { s.Path = "a//b" }, []string{"spec.path"}},
		{"branch with space", func(s *reverser.GitTargetSpec) { s.Branch = "my branch" }, []string{"spec.branch"}},
		{"branch with dots", func(s *reverser.GitTargetSpec) { s.Branch = "a..b" }, []string{"spec.branch"}},
		{"branch .lock", func(s *reverser.GitTargetSpec) { s.Branch = "main.lock" }, []string{"spec.branch"}},
		{"branch leading dash", func(s *reverser.GitTargetSpec) { s.Branch = "-f" }, []string{"spec.branch"}},
		{"missing refs", func(s *reverser.GitTargetSpec) {
			s.KubeProviderRef.Name, s.GitProviderRef.Name = "", "Bad_Name"
		}, []string{"spec.kubeProviderRef.name", "spec.gitProviderRef.name"}},
		{"zero max age", func(s *reverser.GitTargetSpec) { s.Commit.Window.MaxAge.Duration = 0 }, []string{"spec.commit.window.maxAge"}},
		{"zero silence is allowed", func(s *reverser.GitTargetSpec) { s.Commit.Window.Silence.Duration = 0 }, []string{}},
		{"grant with both", func(s *reverser.GitTargetSpec) {
			s.AllowedCommitRequests[0].SourceNamespaces = []string{"*"}
		}, []string{"spec.allowedCommitRequests[0]"}},
		{"grant with neither", func(s *reverser.GitTargetSpec) {
			s.AllowedCommitRequests[0].ConsumerNamespaces = nil
		}, []string{"spec.allowedCommitRequests[0]"}},
		{"star not alone", func(s *reverser.GitTargetSpec) {
			s.AllowedCommitRequests = []reverser.CommitRequestGrant{{SourceNamespaces: []string{"a", "*"}}}
		}, []string{"spec.allowedCommitRequests[0].sourceNamespaces[1]"}},
		{"selector without selector", func(s *reverser.GitTargetSpec) {
			s.AllowedCommitRequests[0].ConsumerNamespaces.From = reverser.NamespacesFromSelector
		}, []string{"spec.allowedCommitRequests[0].consumerNamespaces.selector"}},
		{"names with selector", func(s *reverser.GitTargetSpec) {
			s.AllowedCommitRequests[0].ConsumerNamespaces = &reverser.NamespaceSelection{From: reverser.NamespacesFromNames,
				Names: []string{"a"}, Selector: &metav1.LabelSelector{}}
		}, []string{"spec.allowedCommitRequests[0].consumerNamespaces.selector"}},
		{"same with names", func(s *reverser.GitTargetSpec) {
			s.AllowedCommitRequests[0].ConsumerNamespaces.Names = []string{"a"}
		}, []string{"spec.allowedCommitRequests[0].consumerNamespaces.names"}},
		{"bad applier", func(s *reverser.GitTargetSpec) {
			s.ApplierRef = &reverser.ApplierReference{Kind: "Helm", Name: "x"}
		}, []string{"spec.applierRef.kind"}},
		{"bad age recipient", func(s *reverser.GitTargetSpec) {
			s.Encryption = &reverser.EncryptionSpec{SOPS: reverser.SOPSEncryption{AgeRecipients: []string{"ssh-rsa AAA"}}}
		}, []string{"spec.encryption.sops.ageRecipients[0]"}},
		{"no age recipient", func(s *reverser.GitTargetSpec) {
			s.Encryption = &reverser.EncryptionSpec{}
		}, []string{"spec.encryption.sops.ageRecipients"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validTarget()
			tc.mut(&s)
			assert.Equal(t, tc.want, fields(ValidateGitTargetSpec(&s, field.NewPath("spec"))))
		})
	}
}

func TestValidateGitTargetUpdate(t *testing.T) {
	old := validTarget()
	changed := validTarget()
	changed.Branch, changed.Path = "other", "elsewhere"
	changed.KubeProviderRef.Name, changed.GitProviderRef.Name = "k2", "g2"
	changed.Prune = reverser.PruneOnEvent // mutable
	assert.Equal(t, []string{"spec.branch", "spec.path", "spec.kubeProviderRef", "spec.gitProviderRef"},
		fields(ValidateGitTargetUpdate(&changed, &old, field.NewPath("spec"))))
}

func TestValidateMessage(t *testing.T) {
	cases := map[string]struct {
		msg   string
		valid bool
	}{
		"one character":        {"x", true},
		"multi-line with tabs": {"Title\n\n\tbody\r\n", true},
		"1024 runes":           {strings.Repeat("ü", 1024), true},
		"1025 runes":           {strings.Repeat("a", 1025), false},
		"empty":                {"", false},
		"blank":                {" \n ", false},
		"escape":               {"colour \x1b[31m", false},
		"nul":                  {"a\x00b", false},
		"invalid utf-8":        {"a\xffb", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs := ValidateMessage(tc.msg, field.NewPath("spec", "message"))
			if tc.valid {
				assert.Empty(t, errs)
			} else {
				assert.Equal(t, []string{"spec.message"}, fields(errs))
			}
		})
	}
}

func TestValidateKubeProviderSpec(t *testing.T) {
	secret := &reverser.SecretKeyReference{Namespace: "ops", Name: "remote", Key: "value"}
	cases := []struct {
		name string
		spec reverser.KubeProviderSpec
		want []string
	}{
		{"in cluster", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore}, []string{}},
		{"kubeconfig serving requests", reverser.KubeProviderSpec{KubeConfigSecretRef: secret,
			CommitRequests: reverser.CommitRequestsReconcile}, []string{}},
		{"neither", reverser.KubeProviderSpec{CommitRequests: reverser.CommitRequestsIgnore}, []string{"spec.kubeConfigSecretRef"}},
		{"both", reverser.KubeProviderSpec{InCluster: true, KubeConfigSecretRef: secret, CommitRequests: reverser.CommitRequestsIgnore},
			[]string{"spec.inCluster"}},
		{"in cluster reconciling", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsReconcileAndDeleteFinished},
			[]string{"spec.commitRequests"}},
		{"unknown mode", reverser.KubeProviderSpec{InCluster: true, CommitRequests: "Sometimes"}, []string{"spec.commitRequests"}},
		{"secret key missing", reverser.KubeProviderSpec{KubeConfigSecretRef: &reverser.SecretKeyReference{Namespace: "a", Name: "b"},
			CommitRequests: reverser.CommitRequestsIgnore}, []string{"spec.kubeConfigSecretRef.key"}},
		{"bad source namespace", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			SourceNamespaces: []string{"Not_A_Namespace"}}, []string{"spec.sourceNamespaces[0]"}},
		{"audit by token", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Audit: reverser.AuditSpec{Enabled: true, BearerTokenSecretRef: secret}}, []string{}},
		{"audit by client cert", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Audit: reverser.AuditSpec{Enabled: true, ClientCertificateCommonNames: []string{"kube-apiserver"}}}, []string{}},
		{"audit open", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Audit: reverser.AuditSpec{Enabled: true}}, []string{"spec.audit.bearerTokenSecretRef"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, fields(ValidateKubeProviderSpec(&tc.spec, field.NewPath("spec"))))
		})
	}
}

func TestValidateGitProviderSpec(t *testing.T) {
	cases := map[string]struct {
		url, email string
		branches   []string
		want       []string
	}{
		"https":          {"https://git.example.com/a/b.git", "", []string{"*"}, []string{}},
		"ssh":            {"ssh://git@git.example.com:2222/a/b.git", "", nil, []string{}},
		"scp":            {"git@git.example.com:a/b.git", "me@example.com", nil, []string{}},
		"loopback http":  {"http://127.0.0.1:8080/repo.git", "", []string{"main", "release/*"}, []string{}},
		"no scheme":      {"git.example.com/a", "", nil, []string{"spec.url"}},
		"file":           {"file:///srv/repo", "", nil, []string{"spec.url"}},
		"password":       {"https://u:p@example.com/r", "", nil, []string{"spec.url"}},
		"email":          {"https://example.com/r", "x", nil, []string{"spec.committer.email"}},
		"branch pattern": {"https://example.com/r", "", []string{"a b"}, []string{"spec.allowedBranches[0]"}},
	}
	bad := reverser.GitProviderSpec{URL: "https://example.com/r", AuthorEmailDomain: "Not A Domain"}
	assert.Equal(t, []string{"spec.authorEmailDomain"}, fields(ValidateGitProviderSpec(&bad, field.NewPath("spec"))))
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := reverser.GitProviderSpec{URL: tc.url, Committer: reverser.Committer{Name: "R", Email: tc.email}, AllowedBranches: tc.branches}
			assert.Equal(t, tc.want, fields(ValidateGitProviderSpec(&s, field.NewPath("spec"))))
		})
	}
}

func TestValidateCommitRequest(t *testing.T) {
	valid := reverser.CommitRequestSpec{
		GitTargetRef:        reverser.ObjectReference{Name: "site"},
		Message:             "save",
		Attach:              reverser.AttachCurrent,
		WhenNothingToCommit: reverser.NothingToCommitSkip,
		CatchUp:             reverser.CatchUpAsDefinedOnClaim,
	}
	assert.Empty(t, ValidateCommitRequestSpec(&valid, field.NewPath("spec")))

	bad := valid
	bad.Attach, bad.WhenNothingToCommit, bad.CatchUp = "Later", "Explode", "Never"
	bad.Window.AttachTimeout = &metav1.Duration{Duration: -time.Second}
	assert.Equal(t, []string{"spec.attach", "spec.whenNothingToCommit", "spec.catchUp", "spec.window.attachTimeout"},
		fields(ValidateCommitRequestSpec(&bad, field.NewPath("spec"))))

	changed := valid
	changed.Message = "other"
	assert.Equal(t, []string{"spec"}, fields(ValidateCommitRequestUpdate(&changed, &valid, field.NewPath("spec"))))
	same := valid
	assert.Empty(t, ValidateCommitRequestUpdate(&same, &valid, field.NewPath("spec")))
}

func TestValidateResourceRules(t *testing.T) {
	ok := []reverser.ResourceRule{{APIGroups: []string{"", "apps", "*"}, APIVersions: []string{"v1"}, Resources: []string{"*", "deployments"}}}
	assert.Empty(t, ValidateResourceRules(ok, field.NewPath("rules")))
	assert.Equal(t, []string{"rules"}, fields(ValidateResourceRules(nil, field.NewPath("rules"))))
	bad := []reverser.ResourceRule{{APIGroups: []string{"Apps!"}, APIVersions: []string{"V1"}, Resources: []string{"pods/log"}}}
	assert.Equal(t, []string{"rules[0].apiGroups[0]", "rules[0].apiVersions[0]", "rules[0].resources[0]"},
		fields(ValidateResourceRules(bad, field.NewPath("rules"))))
}
