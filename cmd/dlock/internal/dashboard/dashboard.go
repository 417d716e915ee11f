// Package dashboard holds the static files of the dlock dashboard: one
// page, its stylesheet and script, embedded in the binary. There is no
// front-end build step; edit the files in static/ and rebuild.
package dashboard

import (
	"embed"
	"io/fs"
)

//go:embed static
var files embed.FS

// FS returns the dashboard's files: index.html, dashboard.css,
// dashboard.js and favicon.svg at its root.
func FS() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil { // static is embedded above; cannot happen
		panic(err)
	}
	return sub
}
