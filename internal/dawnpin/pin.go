// Package dawnpin names the Dawn build fusednorm is tested against and where
// cmd/fusednorm-dawn installs it, for the installer and for the runtime's library search,
// which loads a library found in that folder only when its SHA-256 is this one.
package dawnpin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// The pinned library: the npm package bun-webgpu-linux-x64 ships it; scripts/provision.sh
// pins the same package and hash.
const (
	NPMPackage = "bun-webgpu-linux-x64"
	NPMVersion = "0.1.7"
	LibName    = "libwebgpu_wrapper.so"
	LibSHA256  = "3190c3777f2c07fcf6a0640833cbf5d0cde859dc53aed6d9083946d093198788"
)

// InstallCommand is what a module user runs to install the library into CacheDir.
const InstallCommand = "go run github.com/fusednorm/fusednorm/cmd/fusednorm-dawn"

// CacheDir is the folder fusednorm-dawn installs into by default: the user cache's
// fusednorm/dawn-<version> (on Linux $XDG_CACHE_HOME or ~/.cache).
func CacheDir() (string, error) {
	c, err := os.UserCacheDir()
	if err != nil {
		return "", errors.New("no user cache folder (neither $XDG_CACHE_HOME nor $HOME is set)")
	}
	return filepath.Join(c, "fusednorm", "dawn-"+NPMVersion), nil
}

// FileSHA256 is the hex SHA-256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
