package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// pushCommand copies the image index of an OCI layout, then the SBOM
// artifacts that refer to its images, to a registry. The SBOMs go second:
// their subjects must exist first on registries that check.
func pushCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ocibuild push", flag.ContinueOnError)
	dir := fs.String("layout", "", "The OCI image layout `ocibuild build` wrote (OUT/oci). Required.")
	to := fs.String("ref", "", "Where to push: REGISTRY/REPOSITORY:TAG. Required.")
	insecure := fs.Bool("insecure", false, "Plain HTTP to the registry (loopback registries get it anyway).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *to == "" {
		return errors.New("-layout and -ref are required")
	}
	var nameOpts []name.Option
	if *insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	tag, err := name.NewTag(*to, nameOpts...)
	if err != nil {
		return fmt.Errorf("-ref=%q: %w", *to, err)
	}
	p, err := layout.FromPath(*dir)
	if err != nil {
		return fmt.Errorf("reading the layout %s: %w", *dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return fmt.Errorf("reading the layout %s: %w", *dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return fmt.Errorf("reading the layout %s: %w", *dir, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	var pushed v1.Hash
	for _, desc := range m.Manifests {
		if desc.MediaType == types.OCIImageIndex {
			pushed = desc.Digest
		}
	}
	if pushed == (v1.Hash{}) {
		return fmt.Errorf("no image index in the layout %s", *dir)
	}
	for _, desc := range m.Manifests {
		if err := pushOne(p, tag, desc, opts); err != nil {
			return err
		}
	}
	fmt.Println(tag.Context().Digest(pushed.String()).String())
	return nil
}

// pushOne pushes one manifest of the layout: the index under the tag, an
// SBOM artifact by its digest.
func pushOne(p layout.Path, tag name.Tag, desc v1.Descriptor, opts []remote.Option) error {
	switch desc.MediaType {
	case types.OCIImageIndex:
		idx, err := p.ImageIndex()
		if err == nil {
			idx, err = idx.ImageIndex(desc.Digest)
		}
		if err != nil {
			return fmt.Errorf("reading the index %s: %w", desc.Digest, err)
		}
		if err := remote.WriteIndex(tag, idx, opts...); err != nil {
			return fmt.Errorf("pushing the index to %s: %w", tag, err)
		}
		fmt.Printf("pushed the image index %s as %s\n", desc.Digest, tag)
	case types.OCIManifestSchema1:
		img, err := p.Image(desc.Digest)
		if err != nil {
			return fmt.Errorf("reading the manifest %s: %w", desc.Digest, err)
		}
		ref := tag.Context().Digest(desc.Digest.String())
		if err := remote.Write(ref, img, opts...); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
		fmt.Printf("pushed the %s artifact %s\n", desc.ArtifactType, desc.Digest)
	default:
		return fmt.Errorf("unexpected %s in the layout", desc.MediaType)
	}
	return nil
}
