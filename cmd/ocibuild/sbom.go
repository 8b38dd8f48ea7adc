package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// sbomMediaType is SPDX's JSON: the artifact type of the SBOM manifests
// and the media type of their one layer.
const sbomMediaType types.MediaType = "application/spdx+json"

// The parts of an SPDX 2.3 document that an SBOM of Go modules needs.
type (
	spdxDocument struct {
		SPDXVersion       string             `json:"spdxVersion"`
		DataLicense       string             `json:"dataLicense"`
		SPDXID            string             `json:"SPDXID"`
		Name              string             `json:"name"`
		DocumentNamespace string             `json:"documentNamespace"`
		CreationInfo      spdxCreationInfo   `json:"creationInfo"`
		Packages          []spdxPackage      `json:"packages"`
		Relationships     []spdxRelationship `json:"relationships"`
	}
	spdxCreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		SPDXID           string            `json:"SPDXID"`
		Name             string            `json:"name"`
		VersionInfo      string            `json:"versionInfo"`
		DownloadLocation string            `json:"downloadLocation"`
		FilesAnalyzed    bool              `json:"filesAnalyzed"`
		PrimaryPurpose   string            `json:"primaryPackagePurpose,omitempty"`
		Checksums        []spdxChecksum    `json:"checksums,omitempty"`
		ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
	}
	spdxChecksum struct {
		Algorithm string `json:"algorithm"`
		Value     string `json:"checksumValue"`
	}
	spdxExternalRef struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	spdxRelationship struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
)

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdx is the SBOM of the binary at path (content): every Go module its
// build info lists, replacements applied, with versions and package URLs,
// and the Go standard library it was built with.
func spdx(path string, content []byte, plat v1.Platform, o buildOptions) ([]byte, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the build info of %s: %w", path, err)
	}
	sum := sha256.Sum256(content)
	main := spdxPackage{
		SPDXID: "SPDXRef-Package-dualca", Name: info.Main.Path, VersionInfo: o.version,
		DownloadLocation: o.source, PrimaryPurpose: "APPLICATION",
		Checksums:    []spdxChecksum{{Algorithm: "SHA256", Value: hex.EncodeToString(sum[:])}},
		ExternalRefs: []spdxExternalRef{purl(info.Main.Path, o.version)},
	}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "dualca-" + plat.OS + "-" + plat.Architecture,
		DocumentNamespace: o.source + "/spdx/" + hex.EncodeToString(sum[:]),
		CreationInfo:      spdxCreationInfo{Created: o.created.Format(time.RFC3339), Creators: []string{"Tool: dualca ocibuild"}},
		Packages: []spdxPackage{main, {
			SPDXID: "SPDXRef-Package-stdlib", Name: "stdlib", VersionInfo: info.GoVersion,
			DownloadLocation: "https://go.dev/dl/", ExternalRefs: []spdxExternalRef{purl("stdlib", info.GoVersion)},
		}},
		Relationships: []spdxRelationship{
			{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: main.SPDXID},
			{Element: main.SPDXID, Type: "DEPENDS_ON", Related: "SPDXRef-Package-stdlib"},
		},
	}
	for i, dep := range info.Deps {
		if dep.Replace != nil {
			dep = dep.Replace
		}
		id := fmt.Sprintf("SPDXRef-Package-%d-%s", i, spdxIDUnsafe.ReplaceAllString(dep.Path, "-"))
		doc.Packages = append(doc.Packages, spdxPackage{
			SPDXID: id, Name: dep.Path, VersionInfo: dep.Version,
			DownloadLocation: "https://proxy.golang.org/" + dep.Path + "/@v/" + dep.Version + ".zip",
			ExternalRefs:     []spdxExternalRef{purl(dep.Path, dep.Version)},
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: main.SPDXID, Type: "DEPENDS_ON", Related: id})
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the SBOM: %w", err)
	}
	return append(out, '\n'), nil
}

func purl(path, version string) spdxExternalRef {
	return spdxExternalRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + version}
}

// writeSBOMFile puts the SBOM next to the layout, for readers without a
// registry client.
func writeSBOMFile(out string, plat v1.Platform, sbom []byte) error {
	dir := filepath.Join(out, "sbom")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making %s: %w", dir, err)
	}
	name := filepath.Join(dir, plat.OS+"-"+plat.Architecture+".spdx.json")
	if err := os.WriteFile(name, sbom, 0o644); err != nil {
		return fmt.Errorf("writing the SBOM: %w", err)
	}
	return nil
}

// artifact is an OCI 1.1 artifact manifest: the empty config, one layer,
// an artifactType and a subject. go-containerregistry's mutate package
// cannot set artifactType on an image manifest, so the manifest is made
// here and the rest of v1.Image comes from partial.
type artifact struct {
	manifest []byte
	config   v1.Layer
	layer    v1.Layer
}

// sbomArtifact wraps sbom in an artifact whose subject is img, so that a
// registry's referrers API lists it for the image.
func sbomArtifact(img v1.Image, sbom []byte, annotations map[string]string) (v1.Image, error) {
	subject, err := partial.Descriptor(img)
	if err != nil {
		return nil, fmt.Errorf("describing the SBOM's subject: %w", err)
	}
	subject.Platform, subject.Annotations = nil, nil
	a := &artifact{config: static.NewLayer([]byte("{}"), types.OCIEmptyJSON), layer: static.NewLayer(sbom, sbomMediaType)}
	cfg, err := partial.Descriptor(a.config)
	if err != nil {
		return nil, err
	}
	layer, err := partial.Descriptor(a.layer)
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: string(sbomMediaType),
		Config: *cfg, Layers: []v1.Descriptor{*layer}, Subject: subject,
		Annotations: map[string]string{"org.opencontainers.image.created": annotations["org.opencontainers.image.created"]},
	}
	if a.manifest, err = json.Marshal(m); err != nil {
		return nil, fmt.Errorf("encoding the SBOM manifest: %w", err)
	}
	return partial.CompressedToImage(a)
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return []byte("{}"), nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) ArtifactType() (string, error)       { return string(sbomMediaType), nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, l := range []v1.Layer{a.config, a.layer} {
		if d, err := l.Digest(); err == nil && d == h {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no blob %s in the SBOM artifact", h)
}
