package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	specv1 "github.com/opencontainers/image-spec/specs-go/v1"
)

// The user the image runs as: 65532, the "nonroot" uid and gid of the
// distroless images, so a cluster policy that admits those admits this one.
const (
	UID      = 65532
	GID      = 65532
	UserName = "nonroot"
	// Home is the user's home and the image's working directory, owned by
	// UID with mode 0700: `ordercast up`'s default --data-dir
	// (./.ordercast) lands there, and `run` needs nothing written.
	Home = "/var/lib/ordercast"
	// Entrypoint is where the binary is in the image.
	Entrypoint = "/ordercast"
)

// Options are what Build puts into the image besides the binary.
type Options struct {
	Binary   string    // path of the static ordercast binary (CGO_ENABLED=0)
	Arch     string    // GOARCH the binary was built for, e.g. amd64
	Version  string    // org.opencontainers.image.version
	Source   string    // org.opencontainers.image.source (the repository URL)
	Revision string    // org.opencontainers.image.revision (the VCS commit)
	Created  time.Time // the image's created time and every file's mtime (the commit time, for a reproducible image)
}

// Labels are the OCI annotation keys of the image config's labels
// (OCI image spec, annotations.md, "Pre-Defined Annotation Keys").
func (o Options) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "ordercast",
		"org.opencontainers.image.description": "An event-driven order system on Apache Kafka: checkout, orders, payments, notifications, fulfillment",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.licenses":    "MIT",
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

// Build returns the image: no base (empty.Image), one layer with the binary
// at /ordercast, /etc/passwd, /etc/group and /etc/nsswitch.conf for the
// nonroot user, its home (the working directory) and /tmp (1777), and a
// config that runs /ordercast as 65532:65532. Media types are OCI's
// (application/vnd.oci.image.manifest.v1+json). It reads the binary whole
// into memory; errors are those of reading it or of go-containerregistry.
func Build(o Options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(bin, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created:   v1.Time{Time: o.Created},
		CreatedBy: "deploy/image: /ordercast (CGO_ENABLED=0), /etc/passwd, /etc/group, /etc/nsswitch.conf, " + Home + ", /tmp",
		Comment:   "ordercast " + o.Version,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = o.Arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: o.Created}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, GID),
		Entrypoint: []string{Entrypoint},
		Env: []string{
			"PATH=/",
			"HOME=" + Home,
		},
		WorkingDir: Home,
		Labels:     o.Labels(),
		// The ports `ordercast run` is given in deploy/kubernetes: the
		// public listener (--http) and the admin one (--admin-http).
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "9180/tcp": {}},
		StopSignal:   "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the layer's tar: every entry owned by root but the home,
// mtimes at created, in a fixed order, so the same inputs give the same
// digest.
func rootfs(bin []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid,
			ModTime: created, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)),
			ModTime: created, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", UserName, UID, GID, UserName, Home)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, GID)
	steps := []func() error{
		func() error { return file("ordercast", 0o755, bin) },
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		// Go's resolver reads it; without it, glibc's order is assumed.
		func() error { return file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("var", 0o755, 0) },
		func() error { return dir("var/lib", 0o755, 0) },
		func() error { return dir(Home[1:], 0o700, UID) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Check reads the tarball at path back and validates the image in it
// (validate.Image: every layer's digest and diff id against the manifest
// and the config, the config's digest, the manifest's sizes), so that what
// was written, not only what was built in memory, is checked.
func Check(path string) (v1.Image, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return nil, err
	}
	if err := validate.Image(img); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return img, nil
}

// WriteOCIArchive writes img as a tar of an OCI image layout (OCI image
// spec, image-layout.md: oci-layout, index.json, blobs/sha256/...), the
// form that keeps the OCI media types (`podman load`, `skopeo copy
// oci-archive:`, `docker load` since Docker 25, `ctr images import`), with
// ref as the index entry's org.opencontainers.image.ref.name. The layout
// is made in a temporary directory, removed after.
func WriteOCIArchive(path string, img v1.Image, ref string) error {
	tmp, err := os.MkdirTemp("", "ordercast-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{specv1.AnnotationRefName: ref})); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == tmp {
			return err
		}
		rel, _ := filepath.Rel(tmp, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		// Fixed owner and time: the archive depends on the image only.
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime = filepath.ToSlash(rel), 0, 0, "", "", time.Unix(0, 0)
		h.AccessTime, h.ChangeTime, h.Format = time.Time{}, time.Time{}, tar.FormatPAX
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// CheckOCIArchive unpacks the archive at path into a temporary directory
// and validates the image index in it (validate.Index: every manifest,
// config and layer blob against its digest and size). It returns the
// descriptor of the index's one manifest (digest, media type, annotations).
func CheckOCIArchive(path string) (v1.Descriptor, error) {
	var none v1.Descriptor
	tmp, err := os.MkdirTemp("", "ordercast-oci-check-")
	if err != nil {
		return none, err
	}
	defer os.RemoveAll(tmp)
	f, err := os.Open(path)
	if err != nil {
		return none, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return none, err
		}
		dst := filepath.Join(tmp, filepath.Clean("/"+h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return none, err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return none, err
		}
		out, err := os.Create(dst)
		if err != nil {
			return none, err
		}
		_, err = io.Copy(out, tr)
		out.Close()
		if err != nil {
			return none, err
		}
	}
	idx, err := layout.ImageIndexFromPath(tmp)
	if err != nil {
		return none, err
	}
	if err := validate.Index(idx); err != nil {
		return none, fmt.Errorf("%s: %w", path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return none, err
	}
	if len(im.Manifests) != 1 {
		return none, fmt.Errorf("%s: %d manifests in index.json, want 1", path, len(im.Manifests))
	}
	return im.Manifests[0], nil
}
