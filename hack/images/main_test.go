package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	testSpec = imageSpec{Name: "reverser-apiserver", Version: "v1.2.3", Commit: "0123456789ab"}
	testCA   = []byte("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
	testRef  = "reverser.local/reverser-apiserver:v1.2.3"
	amd64    = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64    = v1.Platform{OS: "linux", Architecture: "arm64"}
)

// fakeBins stands in for compiled servers: different bytes per platform,
// so a mix-up between platforms shows.
func fakeBins() []platformBinary {
	return []platformBinary{
		{Platform: amd64, Binary: []byte("\x7fELF fake reverser-apiserver linux/amd64")},
		{Platform: arm64, Binary: []byte("\x7fELF fake reverser-apiserver linux/arm64")},
	}
}

// writeTestTar builds the index from fakeBins and writes its layout tar.
func writeTestTar(t *testing.T, bins []platformBinary) (string, v1.Hash) {
	t.Helper()
	idx, err := buildIndex(testSpec, testCA, bins)
	require.NoError(t, err)
	d, err := idx.Digest()
	require.NoError(t, err)
	dst := filepath.Join(t.TempDir(), "images", "reverser-apiserver-v1.2.3.oci.tar")
	require.NoError(t, writeLayoutTar(idx, testRef, dst))
	return dst, d
}

func TestImageIndexLayoutTar(t *testing.T) {
	tarPath, digest := writeTestTar(t, fakeBins())
	dir := untar(t, tarPath)
	for _, f := range []string{"oci-layout", "index.json", filepath.Join("blobs", "sha256", digest.Hex)} {
		assert.FileExists(t, filepath.Join(dir, f))
	}

	top, err := layout.ImageIndexFromPath(dir)
	require.NoError(t, err)
	topManifest, err := top.IndexManifest()
	require.NoError(t, err)
	require.Len(t, topManifest.Manifests, 1)
	desc := topManifest.Manifests[0]
	assert.Equal(t, digest, desc.Digest, "index.json must point at the index that was built")
	assert.Equal(t, testRef, desc.Annotations["org.opencontainers.image.ref.name"])
	assert.Equal(t, testRef, desc.Annotations["io.containerd.image.name"])

	idx, err := top.ImageIndex(desc.Digest)
	require.NoError(t, err)
	require.NoError(t, validate.Index(idx), "every blob's digest and size must match what references it")
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	assert.Equal(t, testSpec.Version, m.Annotations["org.opencontainers.image.version"])

	want := fakeBins()
	require.Len(t, m.Manifests, len(want))
	for i, d := range m.Manifests {
		require.NotNil(t, d.Platform)
		assert.Equal(t, want[i].Platform.String(), d.Platform.String())
		img, err := idx.Image(d.Digest)
		require.NoError(t, err)
		t.Run(d.Platform.String(), func(t *testing.T) { checkImage(t, img, want[i]) })
	}
}

func checkImage(t *testing.T, img v1.Image, want platformBinary) {
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, want.Platform.OS, cf.OS)
	assert.Equal(t, want.Platform.Architecture, cf.Architecture)
	assert.Equal(t, []string{"/reverser-apiserver"}, cf.Config.Entrypoint)
	assert.Equal(t, "65532:65532", cf.Config.User)
	assert.Contains(t, cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	assert.Equal(t, testSpec.Version, cf.Config.Labels["org.opencontainers.image.version"])
	assert.Equal(t, testSpec.Commit, cf.Config.Labels["org.opencontainers.image.revision"])
	assert.Equal(t, "reverser-apiserver", cf.Config.Labels["org.opencontainers.image.title"])
	assert.Equal(t, modulePath, cf.Config.Labels["org.opencontainers.image.source"])

	files := flatten(t, img)
	passwd := files["etc/passwd"]
	require.NotNil(t, passwd, "/etc/passwd missing")
	assert.Contains(t, string(passwd.data), "\nnonroot:x:65532:65532:nonroot:/home/nonroot:")
	assert.Contains(t, string(files["etc/group"].data), "\nnonroot:x:65532:\n")
	assert.Equal(t, testCA, files["etc/ssl/certs/ca-certificates.crt"].data)

	bin := files[strings.TrimPrefix(cf.Config.Entrypoint[0], "/")]
	require.NotNil(t, bin, "no file at the entrypoint")
	assert.Equal(t, byte(tar.TypeReg), bin.hdr.Typeflag)
	assert.Equal(t, fs.FileMode(0o755), bin.hdr.FileInfo().Mode())
	assert.Equal(t, want.Binary, bin.data)

	tmp := files["tmp"]
	require.NotNil(t, tmp, "/tmp missing")
	assert.Equal(t, fs.ModeDir|fs.ModeSticky|0o777, tmp.hdr.FileInfo().Mode())
	home := files["home/nonroot"]
	require.NotNil(t, home, "/home/nonroot missing")
	assert.Equal(t, nonroot, home.hdr.Uid)
	assert.Equal(t, nonroot, home.hdr.Gid)
}

func TestImageDigestIsStable(t *testing.T) {
	tar1, d1 := writeTestTar(t, fakeBins())
	tar2, d2 := writeTestTar(t, fakeBins())
	assert.Equal(t, d1, d2)
	assert.Equal(t, fileSum(t, tar1), fileSum(t, tar2), "the layout tarball itself must be byte-identical")

	// And the digest does depend on the input: otherwise the above proves nothing.
	other := fakeBins()
	other[1].Binary = append(other[1].Binary, '!')
	_, d3 := writeTestTar(t, other)
	assert.NotEqual(t, d1, d3)
}

func TestPluginArchive(t *testing.T) {
	bin := []byte("\x7fELF fake kubectl-reverser")
	archive, err := pluginArchive(bin, v1.Platform{OS: "darwin", Architecture: "arm64"})
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "kubectl-reverser", hdr.Name)
	assert.Equal(t, byte(tar.TypeReg), hdr.Typeflag)
	assert.Equal(t, fs.FileMode(0o755), hdr.FileInfo().Mode(), "the plugin must be executable")
	got, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.Equal(t, bin, got)
	_, err = tr.Next()
	assert.ErrorIs(t, err, io.EOF, "the archive holds the binary alone")

	again, err := pluginArchive(bin, v1.Platform{OS: "darwin", Architecture: "arm64"})
	require.NoError(t, err)
	assert.Equal(t, archive, again, "archives must be reproducible")
}

func TestWriteSums(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeSums(&b, map[string]string{"b.tar.gz": "22", "a.tar.gz": "11"}))
	assert.Equal(t, "11  a.tar.gz\n22  b.tar.gz\n", b.String())
}

func TestParseFlagsRejects(t *testing.T) {
	for name, args := range map[string][]string{
		"version not a tag": {"--version", "v1.0.0+meta"},
		"non-linux image":   {"--platforms", "darwin/arm64"},
		"platform w/o arch": {"--plugin-platforms", "linux"},
		"stray argument":    {"extra"},
		"unknown flag":      {"--nope"},
		"bad registry":      {"--registry", "reverser.local/"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(args)
			assert.Error(t, err)
		})
	}
	ref, err := imageRef("localhost:5000", "reverser-controller", "v0.1.0-rc.1")
	require.NoError(t, err)
	assert.Equal(t, "localhost:5000/reverser-controller:v0.1.0-rc.1", ref)

	o, err := parseFlags([]string{"--version", "v0.1.0", "--commit", "abc"})
	require.NoError(t, err)
	assert.Equal(t, []v1.Platform{amd64, arm64}, o.platforms)
	assert.Len(t, o.pluginPlatforms, 4)
	assert.Equal(t, "-s -w -X reverser.dev/reverser/pkg/version.Version=v0.1.0 -X reverser.dev/reverser/pkg/version.Commit=abc",
		ldflags(o.version, o.commit))
}

type tarFileEntry struct {
	hdr  *tar.Header
	data []byte
}

// flatten is the image's filesystem as a container would see it.
func flatten(t *testing.T, img v1.Image) map[string]*tarFileEntry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]*tarFileEntry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "/"), "/")] = &tarFileEntry{hdr: hdr, data: data}
	}
}

// untar unpacks the layout tarball the way skopeo's oci-archive does.
func untar(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		require.NoError(t, err)
		require.False(t, strings.HasPrefix(hdr.Name, "/") || strings.Contains(hdr.Name, ".."), "unsafe name %q", hdr.Name)
		dst := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(dst, 0o755))
			continue
		}
		require.Equal(t, byte(tar.TypeReg), hdr.Typeflag, "%s: only files and directories belong in a layout", hdr.Name)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, data, 0o644))
	}
}

func fileSum(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

// The install guide's version check runs each server's entrypoint through
// kubectl exec, as an image without a shell allows (#29: it said to run
// reverser-controller --version, which exists on no host).
func TestInstallGuideRunsTheEntrypoint(t *testing.T) {
	guide, err := os.ReadFile("../../docs/install.md")
	require.NoError(t, err)
	for _, s := range servers {
		want := "exec deploy/" + s.name + " -- /" + s.name + " --version"
		assert.Contains(t, string(guide), want, "docs/install.md does not check %s's version in its Pod", s.name)
	}
}
