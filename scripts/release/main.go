// Command release does the mechanical part of cutting a dlock release
// (docs/releasing.md): it bumps the requirements between the repository's
// modules, packs the published modules of the working tree into a module
// proxy on disk and rehearses what users run against it, and prints the tags
// to create. It creates no tag and pushes nothing.
//
//	go run ./scripts/release bump VERSION       every go.mod and go.work name VERSION for the siblings
//	go run ./scripts/release pack VERSION DIR   the published modules at VERSION as a file proxy in DIR
//	go run ./scripts/release rehearse [VERSION] pack, then go install / go get from that proxy only
//	go run ./scripts/release tags VERSION       the tags of a release, one a line
//	go run ./scripts/release required           the version the modules require of each other
//	go run ./scripts/release tidy DIR...        go mod tidy in module directories (docs/releasing.md)
//
// It is a module of its own (golang.org/x/mod), not published: the root
// module requires valkey-go and nothing heavier.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release bump|pack|rehearse|tags VERSION, release required, release tidy DIR")
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "required", "rehearse", "tidy":
		v, err := requiredVersion(root)
		if err != nil {
			return err
		}
		switch {
		case cmd == "required":
			fmt.Println(v)
			return nil
		case cmd == "tidy":
			if len(args) == 0 {
				return errors.New("usage: release tidy DIR")
			}
			return tidy(root, v, args, os.Stdout)
		case len(args) == 0:
			args = []string{v}
		}
	}
	if len(args) == 0 {
		return fmt.Errorf("%s: missing VERSION", cmd)
	}
	version := args[0]
	if err := checkVersion(version); err != nil {
		return err
	}
	switch cmd {
	case "bump":
		return bump(root, version)
	case "pack":
		if len(args) != 2 {
			return fmt.Errorf("usage: release pack VERSION DIR")
		}
		return pack(root, version, args[1])
	case "rehearse":
		r, err := rehearse(root, version, os.Stdout)
		if err != nil {
			return err
		}
		fmt.Printf("rehearsal of %s passed: %s\n", version, r.VersionLine)
		return nil
	case "tags":
		for _, t := range tags(version) {
			fmt.Println(t)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", cmd)
}
