package validation

import (
	"filippo.io/age"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		Encryption: &reverser.EncryptionSpec{SOPS: reverser.SOPSEncryption{AgeRecipients: []string{recipient}}},
	}
}

// recipient is an age public key, as age-keygen prints it.
var recipient = func() string {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		panic(err)
	}
	return id.Recipient().String()
}()

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
		{"accept all cluster rules", func(s *reverser.GitTargetSpec) { s.AcceptClusterWatchRules = []string{"*"} }, []string{}},
		{"accept named cluster rules", func(s *reverser.GitTargetSpec) {
			s.AcceptClusterWatchRules = []string{"platform", "team.a-rules"}
		}, []string{}},
		{"accept star not alone", func(s *reverser.GitTargetSpec) { s.AcceptClusterWatchRules = []string{"platform", "*"} },
			[]string{"spec.acceptClusterWatchRules[1]"}},
		{"accept bad names", func(s *reverser.GitTargetSpec) { s.AcceptClusterWatchRules = []string{"Not_A_Name", "", "a*"} },
			[]string{"spec.acceptClusterWatchRules[0]", "spec.acceptClusterWatchRules[1]", "spec.acceptClusterWatchRules[2]"}},
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
		{"a target namespace that is no namespace name", func(s *reverser.GitTargetSpec) {
			s.TargetNamespace = "Shop_1"
		}, []string{"spec.targetNamespace"}},
		{"a target namespace", func(s *reverser.GitTargetSpec) { s.TargetNamespace = "shop" }, []string{}},
		{"an age1 prefix that is no key", func(s *reverser.GitTargetSpec) {
			s.Encryption = &reverser.EncryptionSpec{SOPS: reverser.SOPSEncryption{AgeRecipients: []string{"age1qqq"}}}
		}, []string{"spec.encryption.sops.ageRecipients[0]"}},
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
		"one character":                 {"x", true},
		"multi-line with tabs":          {"Title\n\n\tbody\n", true},
		"1024 runes":                    {strings.Repeat("ü", 1024), true},
		"1025 runes":                    {strings.Repeat("a", 1025), false},
		"empty":                         {"", false},
		"blank":                         {" \n ", false},
		"escape":                        {"colour \x1b[31m", false},
		"nul":                           {"a\x00b", false},
		"invalid utf-8":                 {"a\xffb", false},
		"crlf":                          {"Title\r\n\nbody", false},
		"lone carriage return":          {"Title\rbody", false},
		"trailer on second line":        {"Title\nreverser-commit-request: x", false},
		"trailer as subject":            {"Reverser-Commit-Request: uid-1", false},
		"trailer after blanks":          {"Title\n\n \tREVERSER-COMMIT-REQUEST: x", false},
		"trailer with blank before ':'": {"Title\n\nReverser-Commit-Request : x", false},
		"trailer word in a sentence":    {"Title\n\nWe do not write Reverser-Commit-Request: lines", true},
		"trailer name without colon":    {"Reverser-Commit-Request handling", true},
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

func TestValidateMessageSaysWhatIsAllowed(t *testing.T) {
	errs := ValidateMessage("Title\r\n", field.NewPath("spec", "message"))
	assert.Contains(t, errs.ToAggregate().Error(), "carriage return")
	errs = ValidateMessage("Title\nreverser-commit-request: x", field.NewPath("spec", "message"))
	assert.Contains(t, errs.ToAggregate().Error(), "written by Reverser only")
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
		{"valid loan", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Lend: []reverser.NamespaceLoan{
				{SourceNamespaces: []string{"shared", "tools"}, To: reverser.NamespaceSelection{From: reverser.NamespacesFromNames, Names: []string{"team-a"}}},
				{SourceNamespaces: []string{"*"}, To: reverser.NamespaceSelection{From: reverser.NamespacesFromSelector,
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"platform": "true"}}}},
			}}, []string{}},
		// #27 finding 5: what a remote provider lends is said, never implied.
		{"remote lending its namespaces by name and Secrets by a loan", reverser.KubeProviderSpec{KubeConfigSecretRef: secret,
			CommitRequests: reverser.CommitRequestsIgnore, LendSameNamespaces: true, Lend: []reverser.NamespaceLoan{{SourceNamespaces: []string{"vault"},
				To: reverser.NamespaceSelection{From: reverser.NamespacesFromNames, Names: []string{"team-a"}}, Secrets: true}}}, []string{}},
		{"same names on this cluster mean nothing", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			LendSameNamespaces: true}, []string{"spec.lendSameNamespaces"}},
		{"Secrets lent on this cluster mean nothing", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Lend: []reverser.NamespaceLoan{{SourceNamespaces: []string{"vault"}, To: reverser.NamespaceSelection{From: reverser.NamespacesFromAll},
				Secrets: true}}}, []string{"spec.lend[0].secrets"}},
		{"bad source namespace", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Lend: []reverser.NamespaceLoan{{SourceNamespaces: []string{"Not_A_Namespace"}, To: reverser.NamespaceSelection{From: reverser.NamespacesFromAll}}}},
			[]string{"spec.lend[0].sourceNamespaces[0]"}},
		{"loan star not alone", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Lend: []reverser.NamespaceLoan{{SourceNamespaces: []string{"shared", "*"}, To: reverser.NamespaceSelection{From: reverser.NamespacesFromAll}}}},
			[]string{"spec.lend[0].sourceNamespaces[1]"}},
		{"loan to same", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Lend: []reverser.NamespaceLoan{{SourceNamespaces: []string{"shared"}, To: reverser.NamespaceSelection{From: reverser.NamespacesFromSame}}}},
			[]string{"spec.lend[0].to.from"}},
		{"loan of nothing", reverser.KubeProviderSpec{InCluster: true, CommitRequests: reverser.CommitRequestsIgnore,
			Lend: []reverser.NamespaceLoan{{To: reverser.NamespaceSelection{From: reverser.NamespacesFromAll}}}},
			[]string{"spec.lend[0].sourceNamespaces"}},
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
		"https":                {"https://git.example.com/a/b.git", "", []string{"*"}, []string{}},
		"ssh":                  {"ssh://git@git.example.com:2222/a/b.git", "", nil, []string{}},
		"ssh with user":        {"ssh://git@host/r.git", "", nil, []string{}},
		"scp":                  {"git@git.example.com:a/b.git", "me@example.com", nil, []string{}},
		"scp short":            {"git@host:org/r.git", "", nil, []string{}},
		"loopback http":        {"http://127.0.0.1:8080/repo.git", "", []string{"main", "release/*"}, []string{}},
		"no scheme":            {"git.example.com/a", "", nil, []string{"spec.url"}},
		"file":                 {"file:///srv/repo", "", nil, []string{"spec.url"}},
		"password":             {"https://u:p@example.com/r", "", nil, []string{"spec.url"}},
		"https user password":  {"https://u:p@host/r.git", "", nil, []string{"spec.url"}},
		"https token as user":  {"https://tok@host/r.git", "", nil, []string{"spec.url"}},
		"https empty userinfo": {"https://@host/r.git", "", nil, []string{"spec.url"}},
		"http token as user":   {"http://tok@host/r.git", "", nil, []string{"spec.url"}},
		"https token in query": {"https://host/r.git?token=x", "", nil, []string{"spec.url"}},
		"https empty query":    {"https://host/r.git?", "", nil, []string{"spec.url"}},
		"https fragment":       {"https://host/r.git#tok", "", nil, []string{"spec.url"}},
		"user and query":       {"https://tok@host/r.git?token=x", "", nil, []string{"spec.url", "spec.url"}},
		"ssh password":         {"ssh://git:pw@host/r.git", "", nil, []string{"spec.url"}},
		"scp password":         {"git:pw@host:org/r.git", "", nil, []string{"spec.url"}},
		"unparsable":           {"https://u:p@ho st/r.git", "", nil, []string{"spec.url"}},
		"email":                {"https://example.com/r", "x", nil, []string{"spec.committer.email"}},
		"branch pattern":       {"https://example.com/r", "", []string{"a b"}, []string{"spec.allowedBranches[0]"}},
	}
	bad := reverser.GitProviderSpec{URL: "https://example.com/r", AuthorEmailDomain: "Not A Domain"}
	assert.Equal(t, []string{"spec.authorEmailDomain"}, fields(ValidateGitProviderSpec(&bad, "ops", field.NewPath("spec"))))
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := reverser.GitProviderSpec{URL: tc.url, Committer: reverser.Committer{Name: "R", Email: tc.email}, AllowedBranches: tc.branches}
			assert.Equal(t, tc.want, fields(ValidateGitProviderSpec(&s, "ops", field.NewPath("spec"))))
		})
	}
}

// TestGitURLErrorsHideSecrets checks that no refusal shows what it refuses.
func TestGitURLErrorsHideSecrets(t *testing.T) {
	cases := []struct{ url, shown string }{
		{"https://s3cret@host/r.git", "https://<redacted>@host/r.git"},
		{"https://u:s3cret@host/r.git", "https://<redacted>@host/r.git"},
		{"https://host/r.git?token=s3cret", "https://host/r.git?<redacted>"},
		{"https://host/r.git#s3cret", "https://host/r.git#<redacted>"},
		{"https://s3cret@host/r.git?token=s3cret", "https://<redacted>@host/r.git?<redacted>"},
		{"ssh://git:s3cret@host/r.git", "ssh://git:<redacted>@host/r.git"},
		{"git:s3cret@host:org/r.git", "git:<redacted>@host:org/r.git"},
		{"https://u:s3cret@ho st/r.git", "https://<redacted>@ho st/r.git"},
		{"https://u:s3/cret@host/r.git", "https://<redacted>@host/r.git"},
		{"ftp://u:s3cret@host/r.git", "ftp://<redacted>@host/r.git"},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			s := reverser.GitProviderSpec{URL: tc.url, SecretRef: &reverser.LocalObjectReference{Name: "creds"}}
			errs := ValidateGitProviderSpec(&s, "ops", field.NewPath("spec"))
			require.NotEmpty(t, errs)
			for _, e := range errs {
				assert.Equal(t, "spec.url", e.Field)
				assert.Equal(t, tc.shown, e.BadValue)
				assert.NotContains(t, e.Error(), "s3")
			}
		})
	}
}

func TestValidateGitProviderSecretsAndSigning(t *testing.T) {
	creds := &reverser.LocalObjectReference{Name: "creds"}
	signing := func(ns string) *reverser.CommitSigning {
		return &reverser.CommitSigning{SSHKeySecretRef: &reverser.SecretKeyReference{Namespace: ns, Name: "signer", Key: "id"}}
	}
	cases := []struct {
		name string
		spec reverser.GitProviderSpec
		want []string
	}{
		{"https with secret", reverser.GitProviderSpec{URL: "https://host/r.git", SecretRef: creds}, []string{}},
		{"http without secret", reverser.GitProviderSpec{URL: "http://host/r.git"}, []string{}},
		{"http with secret", reverser.GitProviderSpec{URL: "http://host/r.git", SecretRef: creds}, []string{"spec.url"}},
		{"http with secret allowed", reverser.GitProviderSpec{URL: "http://host/r.git", SecretRef: creds, AllowInsecureHTTP: true}, []string{}},
		{"http allowed without secret", reverser.GitProviderSpec{URL: "http://host/r.git", AllowInsecureHTTP: true}, []string{}},
		{"insecure with https", reverser.GitProviderSpec{URL: "https://host/r.git", SecretRef: creds, AllowInsecureHTTP: true},
			[]string{"spec.allowInsecureHTTP"}},
		{"insecure with ssh", reverser.GitProviderSpec{URL: "ssh://git@host/r.git", AllowInsecureHTTP: true}, []string{"spec.allowInsecureHTTP"}},
		{"insecure with scp", reverser.GitProviderSpec{URL: "git@host:org/r.git", AllowInsecureHTTP: true}, []string{"spec.allowInsecureHTTP"}},
		{"insecure with a bad url", reverser.GitProviderSpec{URL: "file:///srv/r.git", AllowInsecureHTTP: true}, []string{"spec.url"}},
		{"signing key in own namespace", reverser.GitProviderSpec{URL: "https://host/r.git", Signing: signing("ops")}, []string{}},
		{"signing key namespace empty", reverser.GitProviderSpec{URL: "https://host/r.git", Signing: signing("")}, []string{}},
		{"signing key in other namespace", reverser.GitProviderSpec{URL: "https://host/r.git", Signing: signing("other")},
			[]string{"spec.signing.sshKeySecretRef.namespace"}},
		{"signing key in bad namespace", reverser.GitProviderSpec{URL: "https://host/r.git", Signing: signing("Not_A_Namespace")},
			[]string{"spec.signing.sshKeySecretRef.namespace"}},
		{"OpenPGP signing key", reverser.GitProviderSpec{URL: "https://host/r.git",
			Signing: &reverser.CommitSigning{OpenPGPKeySecretRef: &reverser.SecretKeyReference{Name: "signer", Key: "gpg"}}}, []string{}},
		{"OpenPGP signing key in other namespace", reverser.GitProviderSpec{URL: "https://host/r.git",
			Signing: &reverser.CommitSigning{OpenPGPKeySecretRef: &reverser.SecretKeyReference{Namespace: "other", Name: "signer", Key: "gpg"}}},
			[]string{"spec.signing.openPGPKeySecretRef.namespace"}},
		{"both signing keys", reverser.GitProviderSpec{URL: "https://host/r.git", Signing: &reverser.CommitSigning{
			SSHKeySecretRef:     &reverser.SecretKeyReference{Name: "signer", Key: "id"},
			OpenPGPKeySecretRef: &reverser.SecretKeyReference{Name: "signer", Key: "gpg"}}}, []string{"spec.signing.openPGPKeySecretRef"}},
		{"no signing key", reverser.GitProviderSpec{URL: "https://host/r.git", Signing: &reverser.CommitSigning{}}, []string{"spec.signing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, fields(ValidateGitProviderSpec(&tc.spec, "ops", field.NewPath("spec"))))
		})
	}
	http := reverser.GitProviderSpec{URL: "http://host/r.git", SecretRef: creds}
	msg := ValidateGitProviderSpec(&http, "ops", field.NewPath("spec")).ToAggregate().Error()
	assert.Contains(t, msg, "in clear")
	assert.Contains(t, msg, "allowInsecureHTTP")
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

	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    []string
	}{
		{"zero attach timeout", 0, []string{}},
		{"attach timeout at the cap", 10 * time.Minute, []string{}},
		{"attach timeout over the cap", 10*time.Minute + time.Second, []string{"spec.window.attachTimeout"}},
		{"negative attach timeout", -time.Second, []string{"spec.window.attachTimeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := valid
			s.Window.AttachTimeout = &metav1.Duration{Duration: tc.timeout}
			assert.Equal(t, tc.want, fields(ValidateCommitRequestSpec(&s, field.NewPath("spec"))))
		})
	}
	long := valid
	long.Window.AttachTimeout = &metav1.Duration{Duration: time.Hour}
	assert.Contains(t, ValidateCommitRequestSpec(&long, field.NewPath("spec")).ToAggregate().Error(), "at most 10m0s")

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

func TestValidateCredentialFields(t *testing.T) {
	rule := func(cf ...reverser.CredentialField) []reverser.ResourceRule {
		return []reverser.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, CredentialFields: cf}}
	}
	ok := rule(reverser.CredentialField{Path: "data.password"}, reverser.CredentialField{Path: "spec.auth.*", Action: reverser.CredentialEncrypt},
		reverser.CredentialField{Path: "metadata.annotations.token", Action: reverser.CredentialDrop})
	assert.Empty(t, ValidateResourceRules(ok, field.NewPath("rules")))
	for _, c := range []struct {
		f    reverser.CredentialField
		want string
	}{
		{reverser.CredentialField{}, "rules[0].credentialFields[0].path"},
		{reverser.CredentialField{Path: "data..x"}, "rules[0].credentialFields[0].path"},
		{reverser.CredentialField{Path: "spec.containers[0].env"}, "rules[0].credentialFields[0].path"},
		{reverser.CredentialField{Path: "*.password"}, "rules[0].credentialFields[0].path"},
		{reverser.CredentialField{Path: "metadata.name"}, "rules[0].credentialFields[0].path"},
		{reverser.CredentialField{Path: "kind"}, "rules[0].credentialFields[0].path"},
		{reverser.CredentialField{Path: "metadata.annotations.x", Action: reverser.CredentialEncrypt}, "rules[0].credentialFields[0].action"},
		{reverser.CredentialField{Path: "data.x", Action: "Hide"}, "rules[0].credentialFields[0].action"},
	} {
		assert.Equal(t, []string{c.want}, fields(ValidateResourceRules(rule(c.f), field.NewPath("rules"))), "%+v", c.f)
	}
	dup := rule(reverser.CredentialField{Path: "data.x"}, reverser.CredentialField{Path: "data.x", Action: reverser.CredentialEncrypt})
	assert.Equal(t, []string{"rules[0].credentialFields[1].path"}, fields(ValidateResourceRules(dup, field.NewPath("rules"))))
}

func TestValidateRepoPath(t *testing.T) {
	cases := []struct {
		name, path string
		valid      bool
	}{
		{"root", "", true},
		{"one folder", "x", true},
		{"nested", "clusters/dev", true},
		{"trailing slash", "x/", true},
		{"dots inside names", "a.b/c..d/.hidden", true},
		{"git-like names", "gitops/.github/my.git.d", true},
		{"253 bytes", strings.Repeat("a", MaxPathLength), true},
		{"unicode letters", "clusters/dév/ünï", true},
		{"dot prefix", "./x", false},
		{"dot inside", "x/./y", false},
		{"dot alone", ".", false},
		{"dot dot inside", "a/../b", false},
		{"dot dot at end", "x/..", false},
		{"dot dot alone", "..", false},
		{"git folder", "a/.git/hooks", false},
		{"git folder in capitals", ".GIT/x", false},
		{"git folder trailing dot", ".git./x", false},
		{"git folder trailing space", ".git /x", false},
		{"git folder trailing dots and spaces", "x/.Git. . ", false},
		{"git folder as stream", ".git::$INDEX_ALLOCATION/x", false},
		{"git short name", "GIT~1", false},
		{"git short name nested", "a/git~1/b", false},
		{"segment ending in dot", "x./y", false},
		{"segment ending in space", "x /y", false},
		{"two trailing slashes", "x//", false},
		{"slash alone", "/", false},
		{"empty segment", "a//b", false},
		{"leading slash", "/x", false},
		{"backslash", `a\b`, false},
		{"254 bytes", strings.Repeat("a", MaxPathLength+1), false},
		{"bidi override", "x/\u202Etxt.yaml", false},
		{"zero-width space", "cl\u200Busters", false},
		{"zero-width joiner", ".g\u200Dit/x", false},
		{"byte order mark", "\uFEFFx", false},
		{"line separator", "x\u2028y", false},
		{"paragraph separator", "x\u2029y", false},
		{"tab", "x\ty", false},
		{"newline", "x\ny", false},
		{"delete", "x\x7fy", false},
		{"invalid utf-8", "x\xffy", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateRepoPath(tc.path, field.NewPath("spec", "path"))
			if tc.valid {
				assert.Empty(t, errs)
			} else {
				assert.Equal(t, []string{"spec.path"}, fields(errs))
			}
		})
	}
}

func TestNormalizeRepoPath(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"x", "x"},
		{"x/", "x"},
		{"clusters/dev/", "clusters/dev"},
		{"x//", "x//"}, // refused by ValidateRepoPath, left as it is
		{"/", "/"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got := NormalizeRepoPath(tc.in)
			assert.Equal(t, tc.want, got)
			// Whatever is valid normalises to a valid path.
			if len(ValidateRepoPath(tc.in, field.NewPath("p"))) == 0 {
				assert.Empty(t, ValidateRepoPath(got, field.NewPath("p")))
			}
		})
	}
}
