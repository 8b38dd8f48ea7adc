package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed parts: where the binary lives and whom it runs as.
const (
	entrypoint = "/dualca"
	user       = "65532:65532"
)

// buildOptions are the flags of `ocibuild build`.
type buildOptions struct {
	dir, out, pkg       string
	version, revision   string
	source, overlay     string
	platforms           []v1.Platform
	created             time.Time
	goBin, binaryLdflag string
}

func parseBuildFlags(args []string) (buildOptions, error) {
	o := buildOptions{}
	fs := flag.NewFlagSet("ocibuild build", flag.ContinueOnError)
	fs.StringVar(&o.dir, "dir", ".", "The dualca module's directory.")
	fs.StringVar(&o.pkg, "pkg", "./cmd/dualca", "The main package, relative to -dir.")
	fs.StringVar(&o.out, "out", "", "Output directory: OUT/oci is the OCI image layout, OUT/sbom the SBOMs. Replaced. Required.")
	fs.StringVar(&o.version, "version", "", "dualca's version: the version label and `dualca version`. Required.")
	fs.StringVar(&o.revision, "revision", "", "The source revision (commit): the revision label and `dualca version`. Required.")
	fs.StringVar(&o.source, "source", "https://github.com/dualca/dualca", "The source label: where the code lives.")
	fs.StringVar(&o.overlay, "overlay", "", "A go build -overlay file (for tests that change a source file without touching the tree).")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "Comma-separated OS/ARCH list.")
	epoch := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "Creation time, seconds since the epoch: the commit time (default $SOURCE_DATE_EPOCH). Required.")
	fs.StringVar(&o.goBin, "go", "go", "The go command.")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if o.out == "" || o.version == "" || o.revision == "" {
		errs = append(errs, errors.New("-out, -version and -revision are required"))
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		errs = append(errs, fmt.Errorf("-created=%q: want seconds since the epoch: %w", *epoch, err))
	}
	o.created = time.Unix(secs, 0).UTC()
	for _, p := range strings.Split(*platforms, ",") {
		goos, arch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" {
			errs = append(errs, fmt.Errorf("-platforms: %q is not linux/ARCH", p))
			continue
		}
		plat := v1.Platform{OS: goos, Architecture: arch}
		if arch == "arm64" {
			plat.Variant = "v8"
		}
		o.platforms = append(o.platforms, plat)
	}
	o.binaryLdflag = fmt.Sprintf("-s -w -X main.version=%s -X main.revision=%s", o.version, o.revision)
	return o, errors.Join(errs...)
}

// labels are the OCI annotations of the image, as config labels and as
// annotations of the index and of each manifest.
func (o buildOptions) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":   o.source,
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.created":  o.created.Format(time.RFC3339),
		"org.opencontainers.image.title":    "dualca",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
}

func buildCommand(ctx context.Context, args []string) error {
	o, err := parseBuildFlags(args)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "ocibuild-")
	if err != nil {
		return fmt.Errorf("making a work directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var artifacts []v1.Image
	for _, plat := range o.platforms {
		img, sbom, err := o.platformImage(ctx, work, plat)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
		art, err := sbomArtifact(img, sbom, o.labels())
		if err != nil {
			return err
		}
		artifacts = append(artifacts, art)
		if err := writeSBOMFile(o.out, plat, sbom); err != nil {
			return err
		}
		if err := report(plat, img); err != nil {
			return err
		}
	}
	idx = mutate.Annotations(idx, o.labels()).(v1.ImageIndex)
	if err := writeLayout(filepath.Join(o.out, "oci"), o.version, idx, artifacts); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("digest of the index: %w", err)
	}
	fmt.Printf("wrote the OCI image layout %s\n", filepath.Join(o.out, "oci"))
	fmt.Println(digest)
	return nil
}

// platformImage compiles dualca for plat and makes its image, returning
// the image and the SBOM of the binary.
func (o buildOptions) platformImage(ctx context.Context, work string, plat v1.Platform) (v1.Image, []byte, error) {
	bin := filepath.Join(work, plat.OS+"-"+plat.Architecture, "dualca")
	if err := o.compile(ctx, plat, bin); err != nil {
		return nil, nil, err
	}
	content, err := os.ReadFile(bin)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the binary: %w", err)
	}
	sbom, err := spdx(bin, content, plat, o)
	if err != nil {
		return nil, nil, err
	}
	layer, err := binaryLayer(content, o.created)
	if err != nil {
		return nil, nil, err
	}
	img, err := o.image(layer, plat)
	if err != nil {
		return nil, nil, fmt.Errorf("image for %s: %w", platformName(plat), err)
	}
	return img, sbom, nil
}

// compile runs go build for plat: static (CGO off), -trimpath so that no
// path of the build machine is in the binary, no VCS stamping (the revision
// comes from -revision, the same on every machine).
func (o buildOptions) compile(ctx context.Context, plat v1.Platform, bin string) error {
	args := []string{"build", "-trimpath", "-mod=readonly", "-buildvcs=false", "-ldflags", o.binaryLdflag, "-o", bin}
	if o.overlay != "" {
		args = append(args, "-overlay", o.overlay)
	}
	cmd := exec.CommandContext(ctx, o.goBin, append(args, o.pkg)...)
	cmd.Dir = o.dir
	// The baseline instruction sets: the index says amd64 and arm64/v8, so
	// the binaries must run on every such machine, whatever the caller's
	// GOAMD64 or GOARM64.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS="+plat.OS, "GOARCH="+plat.Architecture, "GOFLAGS=",
		"GOAMD64=v1", "GOARM64=v8.0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w", platformName(plat), err)
	}
	return nil
}

// binaryLayer is a gzipped tar holding the binary alone, owned by root and
// not writable, with the creation time as its modification time.
func binaryLayer(content []byte, created time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(entrypoint, "/"),
		Mode:     0o555,
		Size:     int64(len(content)),
		ModTime:  created,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	if _, err := tw.Write(content); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	return gzipLayer(buf.Bytes())
}

// gzipLayer compresses a tar stream deterministically: stdlib gzip
// writes no name and a zero modification time in its header. The default
// level: the best one is about three times slower for under 1 % less.
func gzipLayer(tarStream []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarStream)), nil
	}, tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithMediaType(types.OCILayer))
}

// image puts layer on an empty base with dualca's configuration.
func (o buildOptions) image(layer v1.Layer, plat v1.Platform) (v1.Image, error) {
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: fmt.Sprintf("ocibuild: go build %s (CGO_ENABLED=0, -trimpath) for %s", o.pkg, platformName(plat)),
			Comment:   "dualca " + o.version,
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = v1.Time{Time: o.created}
	cf.Author = o.source
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{entrypoint},
		WorkingDir: "/",
		Labels:     o.labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, o.labels()).(v1.Image), nil
}

// writeLayout replaces dir with an OCI image layout holding the index
// (named by the version) and the SBOM artifacts.
func writeLayout(dir, version string, idx v1.ImageIndex, artifacts []v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the old layout: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version})); err != nil {
		return fmt.Errorf("writing the index to the layout: %w", err)
	}
	for _, art := range artifacts {
		if err := p.AppendImage(art); err != nil {
			return fmt.Errorf("writing an SBOM to the layout: %w", err)
		}
	}
	return nil
}

// report prints a platform's manifest digest and compressed size (the sum
// of its layers, what a pull downloads besides the small JSON documents).
func report(plat v1.Platform, img v1.Image) error {
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var size int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return err
		}
		size += n
	}
	fmt.Printf("%s: %s, %d bytes compressed (%.1f MiB)\n", platformName(plat), digest, size, float64(size)/(1<<20))
	return nil
}

func platformName(p v1.Platform) string {
	if p.Variant != "" {
		return p.OS + "/" + p.Architecture + "/" + p.Variant
	}
	return p.OS + "/" + p.Architecture
}
