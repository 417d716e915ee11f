package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

var versionCmd = &command{
	name:     "version",
	synopsis: "[flags]",
	summary:  "print dlock's version and the Go version it was built with",
	help: `
Print the version of dlock: the release's version in a release archive or
package, the module version when installed with 'go install ...@version',
"(devel)" in a source tree;
the VCS revision when known, and the Go version and platform.

Example:
  dlock version --json`,
}

func init() {
	versionCmd.flags = func(x *cmd) any {
		x.fs.Bool(&x.json, "json", "DLOCK_JSON", "print JSON instead of text")
		return nil
	}
	versionCmd.run = runVersion
}

// stampedVersion is the version a release build stamps with
// -ldflags "-X github.com/dlock-dev/dlock/cmd/dlock/internal/cli.stampedVersion=v1.2.3"
// (.goreleaser.yaml). A build without it reports the module version from the
// build information: the version given to `go install ...@version`, or
// "(devel)" in a source tree.
var stampedVersion string

type versionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if stampedVersion != "" {
		v.Version = stampedVersion
	}
	return v
}

func runVersion(ctx context.Context, x *cmd, _, _ []string) int {
	v := buildVersion()
	if x.json {
		return x.printJSON(v)
	}
	s := "dlock " + v.Version
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " (" + rev
		if v.Modified {
			s += ", modified"
		}
		s += ")"
	}
	fmt.Fprintf(x.env.Stdout, "%s %s %s\n", s, v.Go, v.Platform)
	return 0
}
