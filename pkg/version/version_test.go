package version

import (
	"strings"
	"testing"
)

func TestStampedVersionWins(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	Version, Commit = "v1.2.3", "0123456789abcdef0123"
	got := Get().String()
	if !strings.HasPrefix(got, "v1.2.3 (commit 0123456789ab, go") {
		t.Fatalf("stamped version: %q", got)
	}
}

func TestUnstampedVersionIsNeverEmpty(t *testing.T) {
	defer func(v, c string) { Version, Commit = v, c }(Version, Commit)
	Version, Commit = "", ""
	if i := Get(); i.Version == "" || i.Platform == "" {
		t.Fatalf("unstamped: %+v", i)
	}
}
