//go:build linux

// Command guestinit is PID 1 inside the emulated guest booted by ../run.sh: it mounts
// proc, sys, dev and a tmpfs on /tmp, prints the CPU flags the guest kernel sees, runs
// /payload with the arguments listed one per line in /payload.args, in the directory
// named in /payload.cwd (default /tmp), prints "AVX512EMU: EXIT <code>" and powers the
// machine off.
//
// It is its own module so that the main module's ./... patterns never include it.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

func main() {
	for _, d := range []string{"/proc", "/sys", "/dev", "/tmp"} {
		os.MkdirAll(d, 0o755)
	}
	syscall.Mount("proc", "/proc", "proc", 0, "")
	syscall.Mount("sysfs", "/sys", "sysfs", 0, "")
	syscall.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	syscall.Mount("tmpfs", "/tmp", "tmpfs", 0, "")
	fmt.Println("AVX512EMU: init started")
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				fmt.Println("AVX512EMU:", l)
			}
			if strings.HasPrefix(l, "flags") {
				var av []string
				for _, f := range strings.Fields(l) {
					if strings.HasPrefix(f, "avx") || f == "fma" || f == "f16c" {
						av = append(av, f)
					}
				}
				fmt.Println("AVX512EMU: flags:", strings.Join(av, " "))
				break
			}
		}
	}
	var args []string
	if f, err := os.Open("/payload.args"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if l := sc.Text(); l != "" {
				args = append(args, l)
			}
		}
		f.Close()
	}
	dir := "/tmp"
	if b, err := os.ReadFile("/payload.cwd"); err == nil && strings.TrimSpace(string(b)) != "" {
		dir = strings.TrimSpace(string(b))
	}
	fmt.Println("AVX512EMU: running /payload", strings.Join(args, " "), "in", dir)
	cmd := exec.Command("/payload", args...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = os.Stdout, os.Stdout, dir
	cmd.Env = []string{"HOME=/tmp", "TMPDIR=/tmp", "PATH=/"}
	err := cmd.Run()
	code := 0
	if err != nil {
		code = 255
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() >= 0 {
			code = ee.ExitCode()
		} else {
			fmt.Println("AVX512EMU: payload error:", err)
		}
	}
	fmt.Printf("AVX512EMU: EXIT %d\n", code)
	os.Stdout.Sync()
	time.Sleep(100 * time.Millisecond)
	syscall.Sync()
	syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF) // ACPI S5: bochs exits
	for {
		time.Sleep(time.Hour)
	}
}
