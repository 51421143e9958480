// Command fusednorm-dawn fetches the Dawn library the dawn backend was built and tested
// against, checks its SHA-256, and puts it in a folder (by default the one fusednorm.Open
// searches). No npm, no root, no build: the library is the one in the npm package
// bun-webgpu-linux-x64 (Linux x86-64), fetched straight from the npm registry.
//
//	go run github.com/fusednorm/fusednorm/cmd/fusednorm-dawn            # into the user cache
//	go run github.com/fusednorm/fusednorm/cmd/fusednorm-dawn -dir DIR   # into DIR, then
//	export FUSEDNORM_DAWN_LIB=<the path it prints>
//
// fusednorm.Open looks in the user cache folder by itself, and loads the library found there
// only when its SHA-256 is the pinned one. A second run checks the hash and downloads nothing. Dawn also needs a Vulkan loader
// (Debian: libvulkan1) and a Vulkan driver: the GPU's, or lavapipe (mesa-vulkan-drivers)
// to run the GPU path on the CPU for testing.
package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fusednorm/fusednorm/internal/dawnpin"
)

// The pinned library (internal/dawnpin; scripts/provision.sh pins the same package and hash).
const (
	npmPackage = dawnpin.NPMPackage
	npmVersion = dawnpin.NPMVersion
	libName    = dawnpin.LibName
	libSHA256  = dawnpin.LibSHA256
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "fusednorm-dawn:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fusednorm-dawn", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def, _ := dawnpin.CacheDir()
	dir := fs.String("dir", def, "folder to put "+libName+" in")
	registry := fs.String("registry", "", "npm registry to fetch from (default: NPM_CONFIG_REGISTRY, else npm's configured registry)")
	quiet := fs.Bool("q", false, "print only the library's path")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *dir == "" {
		return errors.New("no user cache folder here; pass -dir")
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		fmt.Fprintf(stderr, "fusednorm-dawn: note: the pinned library is for linux/amd64, this is %s/%s\n", runtime.GOOS, runtime.GOARCH)
	}
	lib := filepath.Join(*dir, libName)
	if sum, err := dawnpin.FileSHA256(lib); err == nil && sum == libSHA256 {
		report(stdout, lib, "present, sha256 ok", *quiet)
		return nil
	}
	if *registry == "" {
		r, err := npmRegistry(ctx)
		if err != nil {
			return err
		}
		*registry = r
	}
	url := fmt.Sprintf("%s/%s/-/%s-%s.tgz", *registry, npmPackage, npmPackage, npmVersion)
	if !*quiet {
		fmt.Fprintf(stderr, "fusednorm-dawn: fetching %s\n", url)
	}
	if err := fetch(ctx, url, lib); err != nil {
		return err
	}
	report(stdout, lib, "installed, sha256 ok", *quiet)
	return nil
}

func report(w io.Writer, lib, what string, quiet bool) {
	if quiet {
		fmt.Fprintln(w, lib)
		return
	}
	fmt.Fprintf(w, "fusednorm-dawn: %s (%s)\n", lib, what)
	if def, err := dawnpin.CacheDir(); err == nil && filepath.Dir(lib) == def {
		fmt.Fprintln(w, "fusednorm.Open finds it there: nothing to set")
		return
	}
	fmt.Fprintf(w, "export FUSEDNORM_DAWN_LIB=%s\n", lib)
}

// fetch downloads the package, takes the library out of it, checks its hash and moves it
// into place; nothing is left at lib unless the hash matched.
func fetch(ctx context.Context, url, lib string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return fmt.Errorf("%s holds no package/%s", url, libName)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		if h.Name == "package/"+libName && h.Typeflag == tar.TypeReg {
			return install(tr, lib)
		}
	}
}

func install(r io.Reader, lib string) error {
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(lib), libName+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != libSHA256 {
		return fmt.Errorf("%s from %s@%s: sha256 %s, want %s", libName, npmPackage, npmVersion, got, libSHA256)
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), lib)
}

// npmRegistry is the registry npm itself would use: NPM_CONFIG_REGISTRY (either case), else
// `npm config get registry`. The download is checked against the pinned hash, so any mirror
// of the package does.
func npmRegistry(ctx context.Context) (string, error) {
	for _, k := range []string{"NPM_CONFIG_REGISTRY", "npm_config_registry"} {
		if r := os.Getenv(k); r != "" {
			return strings.TrimRight(r, "/"), nil
		}
	}
	out, err := exec.CommandContext(ctx, "npm", "config", "get", "registry").Output()
	if r := strings.TrimSpace(string(out)); err == nil && strings.HasPrefix(r, "http") {
		return strings.TrimRight(r, "/"), nil
	}
	return "", fmt.Errorf("no npm registry known (npm config get registry: %v): pass -registry URL or set NPM_CONFIG_REGISTRY", err)
}
