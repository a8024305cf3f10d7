// Package version holds the build's version, stamped by the linker:
//
//	go build -ldflags "-X reverser.dev/reverser/pkg/version.Version=v0.1.0 -X reverser.dev/reverser/pkg/version.Commit=abc1234"
//
// Every binary prints it with --version. An unstamped build reports the
// module version and VCS revision Go recorded, or "dev".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by -ldflags -X; empty when the build did not stamp them.
var (
	Version string
	Commit  string
)

// Info is what a binary reports about itself.
type Info struct {
	Version, Commit, GoVersion, Platform string
}

// Get returns the stamped version, falling back to Go's build info.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && i.Commit == "" {
				i.Commit = s.Value
			}
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if len(i.Commit) > 12 {
		i.Commit = i.Commit[:12]
	}
	return i
}

// String is the one line --version prints, after the binary's name.
func (i Info) String() string {
	c := i.Commit
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, c, i.GoVersion, i.Platform)
}
