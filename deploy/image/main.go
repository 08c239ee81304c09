// Command image writes the Ordercast container image as a tarball without a
// container engine: the static binary of ./cmd/ordercast in one layer on no
// base, with go-containerregistry (github.com/google/go-containerregistry),
// then reads the tarball back and validates it. `make image` runs it; the
// tarball loads with `docker load -i`, `podman load -i`,
// `kind load image-archive` and `crane push`.
//
// It is a module of its own so that go-containerregistry stays out of the
// runtime's module graph.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	var o Options
	var out, ociOut, tag, created string
	flag.StringVar(&o.Binary, "binary", "", "the static ordercast binary (CGO_ENABLED=0 go build ./ordercast in cmd/)")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "GOARCH the binary was built for")
	flag.StringVar(&o.Version, "version", "dev", "org.opencontainers.image.version")
	flag.StringVar(&o.Source, "source", "https://github.com/ordercast/ordercast", "org.opencontainers.image.source")
	flag.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision: the VCS commit")
	flag.StringVar(&created, "created", os.Getenv("SOURCE_DATE_EPOCH"), "the image's created time, Unix seconds (the commit time makes the image reproducible; default SOURCE_DATE_EPOCH, else 0)")
	flag.StringVar(&out, "out", "bin/ordercast-image.tar", "the tarball to write")
	flag.StringVar(&ociOut, "oci-out", "", "also write the image as an OCI image layout archive here (oci-archive: podman, skopeo, ctr; keeps the OCI media types, which the docker-save form of --out does not)")
	flag.StringVar(&tag, "tag", "ordercast:dev", "the tag recorded in the tarball's manifest.json")
	flag.Parse()
	if err := run(o, out, ociOut, tag, created); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o Options, out, ociOut, tag, created string) error {
	if o.Binary == "" {
		return fmt.Errorf("--binary is required")
	}
	secs := int64(0)
	if created != "" {
		var err error
		if secs, err = strconv.ParseInt(created, 10, 64); err != nil {
			return fmt.Errorf("--created %q: want Unix seconds", created)
		}
	}
	o.Created = time.Unix(secs, 0).UTC()
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", tag, err)
	}
	img, err := Build(o)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return err
	}
	if _, err := Check(out); err != nil {
		return err
	}
	d, _ := img.Digest()
	fmt.Printf("%s: %s, image %s, validated (docker-save form)\n", out, ref, d)
	if ociOut != "" {
		if err := WriteOCIArchive(ociOut, img, ref.String()); err != nil {
			return err
		}
		desc, err := CheckOCIArchive(ociOut)
		if err != nil {
			return err
		}
		if desc.Digest != d {
			return fmt.Errorf("%s: manifest %s, want the image's %s", ociOut, desc.Digest, d)
		}
		fmt.Printf("%s: %s, image %s (%s), validated (OCI image layout)\n", ociOut, ref, desc.Digest, desc.MediaType)
	}
	return nil
}
