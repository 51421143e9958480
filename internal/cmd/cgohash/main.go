// Command cgohash writes internal/cinclude's generated file into a cgo package's directory: the
// hash of the C files the package compiles from outside it, so that an edit to them rebuilds
// the package. Run by `go generate` in internal/dawnrt and cmd/fusednorm-bench/internal/twin.
//
// Usage:
//
//	cgohash [-check] [dir]
package main

import (
	"flag"
	"log"
	"os"
	"path/filepath"

	"github.com/fusednorm/fusednorm/internal/cinclude"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("cgohash: ")
	check := flag.Bool("check", false, "fail when the file is stale instead of writing it")
	flag.Parse()
	dir := "."
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	if *check {
		if err := cinclude.Check(dir); err != nil {
			log.Fatal(err)
		}
		return
	}
	b, err := cinclude.Generate(dir)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, cinclude.FileName), b, 0o644); err != nil {
		log.Fatal(err)
	}
}
