package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// repoRoot is the root module's directory, two levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "ordercast")); err != nil {
		t.Fatalf("root module not at %s: %v", root, err)
	}
	return root
}

// TestImageRunsReplay builds the static binary and the image the way
// `make image` does, reads the tarball back, unpacks its filesystem,
// and runs the entrypoint exactly as the image config says: as its
// user (chroot into the unpacked filesystem, setuid to the config's uid,
// when the test runs as root), with its environment and working
// directory, and `up --replay` of the one-day data set with
// --exit-when-done, which exits 0 only if every order went through every
// service and every invariant held.
func TestImageRunsReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a replay: not under -short")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "ordercast-static")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./ordercast")
	build.Dir = filepath.Join(root, "cmd") // the module github.com/ordercast/ordercast/cmd
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	o := Options{Binary: bin, Arch: runtime.GOARCH, Version: "test", Source: "https://example.invalid/ordercast",
		Revision: "0123456789abcdef", Created: time.Unix(1700000000, 0).UTC()}
	built, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := built.MediaType(); mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest media type %s, want OCI's", mt)
	}
	want, _ := built.Digest()
	ociPath := filepath.Join(dir, "image.oci.tar")
	if err := WriteOCIArchive(ociPath, built, "ordercast:test"); err != nil {
		t.Fatal(err)
	}
	desc, err := CheckOCIArchive(ociPath)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want || desc.MediaType != "application/vnd.oci.image.manifest.v1+json" ||
		desc.Annotations["org.opencontainers.image.ref.name"] != "ordercast:test" {
		t.Errorf("OCI archive's manifest %s %s %v, want %s, OCI's media type, ref ordercast:test", desc.Digest, desc.MediaType, desc.Annotations, want)
	}
	tarPath := filepath.Join(dir, "image.tar")
	if err := tarball.WriteToFile(tarPath, name.MustParseReference("ordercast:test"), built); err != nil {
		t.Fatal(err)
	}
	// The docker-save form (what `docker load` and `kind load
	// image-archive` read) read back and validated; from here on the test
	// uses what was written, not what was built.
	img, err := Check(tarPath)
	if err != nil {
		t.Fatal(err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.revision": o.Revision,
	} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	uid, gid := parseUser(t, c.User)
	if uid == 0 {
		t.Fatalf("config User %q: the image must not run as root", c.User)
	}
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/ordercast" {
		t.Fatalf("config Entrypoint %q, want [/ordercast]", c.Entrypoint)
	}
	if c.WorkingDir == "" {
		t.Fatal("config WorkingDir empty")
	}

	// The same digest from the same inputs: the image is reproducible.
	again, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := again.Digest(); d2 != want {
		t.Errorf("two builds of the same inputs: digests %s and %s", want, d2)
	}

	rootfs := filepath.Join(dir, "rootfs")
	asRoot := os.Geteuid() == 0
	unpack(t, img, rootfs, asRoot)
	for _, p := range []string{"etc/passwd", "tmp", strings.TrimPrefix(c.WorkingDir, "/")} {
		if _, err := os.Stat(filepath.Join(rootfs, p)); err != nil {
			t.Errorf("image filesystem: %v", err)
		}
	}
	if fi, err := os.Stat(filepath.Join(rootfs, "tmp")); err == nil && fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("/tmp mode %v, want sticky and world-writable", fi.Mode())
	}
	passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	if !strings.Contains(string(passwd), ":"+strconv.Itoa(uid)+":"+strconv.Itoa(gid)+":") {
		t.Errorf("/etc/passwd has no entry for %d:%d:\n%s", uid, gid, passwd)
	}

	// The one-day data set goes in as a volume would: a read-only file
	// the user can read.
	csv, err := os.ReadFile(filepath.Join(root, "data", "online-retail", "online_retail_2010-12-01.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "data", "day.csv"), csv, 0o444); err != nil {
		t.Fatal(err)
	}

	ports := freePorts(t, 4)
	args := []string{"up", "--replay", "/data/day.csv", "--exit-when-done", "--report", "/tmp/report.json", "--timeout", "3m",
		"--broker-addr", ports[0], "--registry-addr", ports[1], "--http", ports[2], "--admin-http", ports[3]}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if asRoot {
		// As a container runtime starts it: root of the filesystem at
		// the unpacked layer, the config's uid and gid, working dir and
		// environment, and nothing else.
		cmd = exec.CommandContext(ctx, c.Entrypoint[0], args...)
		cmd.Err = nil // the path is inside the chroot, not on this host
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Chroot:     rootfs,
			Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		}
		cmd.Dir = c.WorkingDir
	} else {
		t.Logf("not root: running %s as this user (no chroot, no setuid); /data and /tmp are the host's paths", c.Entrypoint[0])
		for i, a := range args {
			if strings.HasPrefix(a, "/data/") || strings.HasPrefix(a, "/tmp/") {
				args[i] = filepath.Join(rootfs, a)
			}
		}
		cmd = exec.CommandContext(ctx, filepath.Join(rootfs, c.Entrypoint[0]), args...)
		cmd.Dir = filepath.Join(rootfs, c.WorkingDir)
	}
	cmd.Env = slices.Clone(c.Env)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s (user %s, dir %s, env %q): %v\n%s", c.Entrypoint[0], strings.Join(args, " "), c.User, c.WorkingDir, c.Env, err, out)
	}
	reportPath := filepath.Join(rootfs, "tmp", "report.json")
	b, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	var rep struct {
		Status         string `json:"status"`
		OrdersAccepted int    `json:"ordersAccepted"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Status != "passed" || rep.OrdersAccepted == 0 {
		t.Fatalf("report status %q with %d orders accepted, want passed with some:\n%s\n%s", rep.Status, rep.OrdersAccepted, b, out)
	}
	if asRoot {
		// The data directory was made by the image's user, in its
		// working directory.
		fi, err := os.Stat(filepath.Join(rootfs, c.WorkingDir, ".ordercast"))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
			t.Errorf(".ordercast owned by uid %d, want %d", st.Uid, uid)
		}
	}
	t.Logf("replay in the image: %s, %d orders accepted", rep.Status, rep.OrdersAccepted)
}

// parseUser reads the config's User as uid:gid (numbers, as Kubernetes'
// runAsNonRoot needs to check it without the image's /etc/passwd).
func parseUser(t *testing.T, u string) (int, int) {
	t.Helper()
	us, gs, ok := strings.Cut(u, ":")
	uid, err1 := strconv.Atoi(us)
	gid, err2 := strconv.Atoi(gs)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("config User %q: want numeric uid:gid", u)
	}
	return uid, gid
}

// unpack writes the image's flattened filesystem (mutate.Extract) under
// dst, with each entry's mode, and its owner when chown is set.
func unpack(t *testing.T, img v1.Image, dst string, chown bool) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	type dirMode struct {
		path string
		mode os.FileMode
	}
	var dirs []dirMode
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, filepath.Clean("/"+h.Name))
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, dirMode{p, mode})
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			t.Fatalf("%s: entry type %q not expected in this image", h.Name, h.Typeflag)
		}
		if chown {
			if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Modes last: a directory of 0700 must not stop the entries in it.
	for _, d := range dirs {
		if err := os.Chmod(d.path, d.mode.Perm()|d.mode&(os.ModeSticky|os.ModeSetgid|os.ModeSetuid)); err != nil {
			t.Fatal(err)
		}
	}
}

// freePorts returns n loopback addresses whose ports were free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var ls []net.Listener
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}
