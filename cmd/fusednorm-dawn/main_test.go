package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tgz is an npm tarball holding package/<libName> with the given content.
func tgz(t *testing.T, content []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		data []byte
	}{{"package/package.json", []byte("{}")}, {"package/" + libName, content}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// TestRefusesAWrongHash serves a package whose library is not the pinned one: nothing may
// be installed. (The real download is checked by hand and by make provision.)
func TestRefusesAWrongHash(t *testing.T) {
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.Path
		w.Write(tgz(t, []byte("not dawn")))
	}))
	defer srv.Close()
	dir := t.TempDir()
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"-dir", dir, "-registry", srv.URL}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("wrong library: err %v, want a sha256 mismatch", err)
	}
	if want := "/" + npmPackage + "/-/" + npmPackage + "-" + npmVersion + ".tgz"; asked != want {
		t.Errorf("fetched %s, want %s", asked, want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %d files after a failed download", len(ents))
	}
}

func TestNotFoundAndHelp(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-dir", t.TempDir(), "-registry", srv.URL}, &out, &out); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: err %v", err)
	}
	if err := run(context.Background(), []string{"-dir", filepath.Join(t.TempDir(), "x"), "extra"}, &out, &out); err == nil {
		t.Error("extra argument accepted")
	}
}
