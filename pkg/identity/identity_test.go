package identity

import (
	"net/mail"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGitName(t *testing.T) {
	for _, tc := range []struct{ user, want string }{
		{"alice", "alice"},
		{"Jane Doe", "Jane Doe"},
		{"system:serviceaccount:ops:deployer", "system:serviceaccount:ops:deployer"},
		{"jane.doe@corp.example", "jane.doe@corp.example"},
		{"", UnresolvedName},
		{"Eve <ceo@corp.example>", "Eve %3Cceo@corp.example%3E"},
		{"eve\nauthor Mallory <m@x>", "eve%0Aauthor Mallory %3Cm@x%3E"},
		{"a\r\tb\x7f", "a%0D%09b%7F"},
		{"nul\x00", "nul%00"},
		{"next\u0085line", "next%C2%85line"},
		{"100%", "100%25"},
		{"%3C", "%253C"},
		{" alice ", "%20alice%20"},
		{"  alice", "%20 alice"},
		{".alice.", "%2Ealice%2E"},
		{"alice.bob", "alice.bob"},
		{"'quoted'", "%27quoted%27"},
		{`"x"`, "%22x%22"},
		{",x;", "%2Cx%3B"},
		{":x:", "%3Ax%3A"},
		{`x\`, "x%5C"},
		{"é", "é"},
		{"\u00a0x", "%C2%A0x"},
		{"a\xffb", "a%FFb"},
		{".", "%2E"},
		// Format characters (#27, finding 8): "alice\u202Eecila" would show
		// as "aliceecila" reversed, and a zero-width space hides a second name.
		{"alice\u202Eevil", "alice%E2%80%AEevil"},
		{"al\u200Bice", "al%E2%80%8Bice"},
		{"\u2066x\u2069", "%E2%81%A6x%E2%81%A9"},
	} {
		t.Run(strconv.Quote(tc.user), func(t *testing.T) {
			assert.Equal(t, tc.want, GitName(tc.user))
		})
	}
}

func TestEmail(t *testing.T) {
	const d = "example.org"
	for _, tc := range []struct{ user, domain, want string }{
		{"alice", d, "alice@example.org"},
		{"alice", "", "alice@" + DefaultEmailDomain},
		{"Alice", d, "=41lice@example.org"},
		{"jane@corp.example", d, "jane@corp.example"},
		{"Jane.O'Neil+ops@corp.example", d, "Jane.O'Neil+ops@corp.example"},
		{"jane@Corp.Example", d, "jane=40=43orp.=45xample@example.org"},
		{"jane@localhost", d, "jane=40localhost@example.org"},
		{".jane@corp.example", d, "=2Ejane=40corp.example@example.org"},
		{"ja..ne@corp.example", d, "ja.=2Ene=40corp.example@example.org"},
		{"a@b@corp.example", d, "a=40b=40corp.example@example.org"},
		{"jane%x@corp.example", d, "jane=25x=40corp.example@example.org"},
		{"alice@example.org", d, "alice=40example.org@example.org"},
		{"alice@example.org", "Example.ORG", "alice=40example.org@Example.ORG"},
		{"system:serviceaccount:ops:deployer", d, "deployer.ops.serviceaccount@example.org"},
		{"system:serviceaccount:ops:deploy.er", d, "deploy.er.ops.serviceaccount@example.org"},
		{"system:serviceaccount:Ops:deployer", d, "system=3Aserviceaccount=3A=4Fps=3Adeployer@example.org"},
		{"system:serviceaccount:a.b:x", d, "system=3Aserviceaccount=3Aa.b=3Ax@example.org"},
		{"system:serviceaccount:ops", d, "system=3Aserviceaccount=3Aops@example.org"},
		{"deployer.ops.serviceaccount", d, "deployer.ops=2Eserviceaccount@example.org"},
		{".serviceaccount", d, "=2Eserviceaccount@example.org"},
		{"system:admin", d, "system=3Aadmin@example.org"},
		{"system:kube-controller-manager", d, "system=3Akube-controller-manager@example.org"},
		{"Alice Smith", d, "=41lice=20=53mith@example.org"},
		{"oidc:https://issuer#1234", d, "oidc=3Ahttps=3A=2F=2Fissuer=231234@example.org"},
		{"alice.", d, "alice=2E@example.org"},
		{"a=41", d, "a=3D41@example.org"},
		{"attribution=unresolved", d, "attribution=3Dunresolved@example.org"},
		{"é", d, "=C3=A9@example.org"},
		{"Eve <ceo@corp.example>", d, "=45ve=20=3Cceo=40corp.example=3E@example.org"},
		{"eve\nx", d, "eve=0Ax@example.org"},
		{"", d, "attribution=unresolved@example.org"},
	} {
		t.Run(strconv.Quote(tc.user)+"@"+tc.domain, func(t *testing.T) {
			assert.Equal(t, tc.want, Email(tc.user, tc.domain))
		})
	}
}

func TestIdentity(t *testing.T) {
	for _, tc := range []struct {
		user string
		want Signature
	}{
		{"alice", Signature{Name: "alice", Email: "alice@example.org"}},
		{"Eve <ceo@corp.example>", Signature{Name: "Eve %3Cceo@corp.example%3E",
			Email: "=45ve=20=3Cceo=40corp.example=3E@example.org"}},
		{"system:serviceaccount:ops:deployer", Signature{Name: "system:serviceaccount:ops:deployer",
			Email: "deployer.ops.serviceaccount@example.org"}},
		{"", Signature{Name: UnresolvedName, Email: "attribution=unresolved@example.org"}},
	} {
		t.Run(strconv.Quote(tc.user), func(t *testing.T) {
			assert.Equal(t, tc.want, For(tc.user, "example.org"))
		})
	}
	assert.Equal(t, Unresolved("example.org"), For("", "example.org"))
	assert.Equal(t, "attribution=unresolved@"+DefaultEmailDomain, Unresolved("").Email)
}

func TestIdentityKeepsUsersApart(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"Alice", "alice"},
		{"deployer.ops.serviceaccount", "system:serviceaccount:ops:deployer"},
		{"alice@example.org", "alice"},
		{"alice@example.org", "alice=40example.org"},
		{"attribution=unresolved", ""},
		{"a.serviceaccount", "a..serviceaccount"},
		{"eve\n", "eve%0A"},
		{"<eve>", "%3Ceve%3E"},
	} {
		t.Run(strconv.Quote(tc.a)+" "+strconv.Quote(tc.b), func(t *testing.T) {
			a, b := For(tc.a, "example.org"), For(tc.b, "example.org")
			assert.NotEqual(t, a.Email, b.Email)
			assert.NotEqual(t, a.Name, b.Name)
		})
	}
}

// TestIdentityIsInjective maps every string of up to three tricky fragments:
// no two user names share an address, every address parses, and every name
// is safe in a commit header and decodes back to its user name.
func TestIdentityIsInjective(t *testing.T) {
	const d = "example.org"
	fragments := []string{
		"a", "A", "z9", ".", "..", "@", "=", "=2E", "=3D", "%", "%3C", "<", ">", "\n", "\r", " ", "\t", "é", "\xff", ":", "\"",
		`\`, "'", "-", "_", "system:serviceaccount:", "system:serviceaccount:ops:", "ops", "deployer", "deployer.ops", "serviceaccount",
		".serviceaccount", "example.org", "@example.org", "@corp.example", "attribution=unresolved", "unresolved",
	}
	users := map[string]bool{}
	var gen func(prefix string, depth int)
	gen = func(prefix string, depth int) {
		users[prefix] = true
		if depth == 0 {
			return
		}
		for _, f := range fragments {
			gen(prefix+f, depth-1)
		}
	}
	gen("", 3)
	delete(users, "")
	require.Greater(t, len(users), 40000)

	unresolved := Unresolved(d)
	byEmail := map[string]string{}
	for user := range users {
		id := For(user, d)
		if other, taken := byEmail[id.Email]; taken {
			t.Fatalf("%q and %q share %s", user, other, id.Email)
		}
		byEmail[id.Email] = user
		require.NotEqual(t, unresolved.Email, id.Email, "user %q", user)

		addr, err := mail.ParseAddress(id.Email)
		require.NoError(t, err, "user %q: %s", user, id.Email)
		require.Equal(t, id.Email, addr.Address, "user %q", user)

		require.True(t, utf8.ValidString(id.Name), "user %q: %q", user, id.Name)
		require.False(t, strings.ContainsAny(id.Name, "<>"), "user %q: %q", user, id.Name)
		for _, r := range id.Name {
			require.False(t, unicode.IsControl(r), "user %q: %q", user, id.Name)
		}
		first, _ := utf8.DecodeRuneInString(id.Name)
		last, _ := utf8.DecodeLastRuneInString(id.Name)
		require.False(t, strippedAtEnds(first) || strippedAtEnds(last), "user %q: %q", user, id.Name)
		require.Equal(t, user, percentDecode(t, id.Name), "the name decodes to the user name")
	}
}

func percentDecode(t *testing.T, s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		require.LessOrEqual(t, i+3, len(s), "a %% escape in %q", s)
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		require.NoError(t, err)
		require.Equal(t, strings.ToUpper(s[i+1:i+3]), s[i+1:i+3])
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String()
}
