// Command images builds reverser's release artifacts without Docker:
//
//   - one multi-arch OCI image index per server (reverser-apiserver,
//     reverser-controller), written as an OCI image-layout tarball
//     _output/images/<name>-<version>.oci.tar, which docker load, podman load
//     and skopeo copy oci-archive: all read;
//   - the kubectl-reverser plugin as _output/release/
//     kubectl-reverser_<version>_<os>_<arch>.tar.gz, plus SHA256SUMS.
//
// The images are assembled from scratch instead of FROM a base image
// because the build has no registry access. Their base layer is the part of
// distroless/static the servers rely on: passwd and group entries for root
// and nonroot (65532), the host's CA bundle, a world-writable /tmp and
// nonroot's home. Binaries are built with -trimpath and without VCS stamping,
// and every layer and archive has fixed mtimes, owners and entry order, so
// the same sources and flags give the same digests.
//
// It also writes _output/deploy/kustomization.yaml: artifacts/deploy with
// its images set to the ones built (registry/name:version), which
// `kubectl apply --server-side -k _output/deploy` installs once the images
// are pushed there. --overlay-only writes just that.
//
//	go run ./hack/images --version v0.1.0 --commit abc1234 --registry registry.example
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	modulePath = "reverser.dev/reverser"
	versionPkg = modulePath + "/pkg/version"
	caFile     = "/etc/ssl/certs/ca-certificates.crt"
	nonroot    = 65532
	pluginName = "kubectl-reverser"
	pluginPkg  = "./cmd/kubectl-reverser"
)

// epoch is every file's mtime and the images' creation time: a wall-clock
// time would change the digests on every build.
var epoch = time.Unix(0, 0).UTC()

type server struct{ name, pkg string }

var servers = []server{
	{"reverser-apiserver", "./cmd/apiserver"},
	{"reverser-controller", "./cmd/controller"},
}

type options struct {
	out, version, commit, registry string
	platforms, pluginPlatforms     []v1.Platform
	overlayOnly                    bool
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.StringVar(&o.out, "out", "_output", "output directory")
	fs.StringVar(&o.version, "version", "dev", "version stamped into the binaries, labels, tags and file names")
	fs.StringVar(&o.commit, "commit", "", "commit stamped into the binaries and the revision label")
	fs.StringVar(&o.registry, "registry", "reverser.local", "registry the image references name")
	fs.BoolVar(&o.overlayOnly, "overlay-only", false, "write only <out>/deploy, the install overlay naming the images")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "image platforms, comma-separated")
	plugin := fs.String("plugin-platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "plugin platforms, comma-separated")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.platforms, err = parsePlatforms(*platforms); err != nil {
		return o, fmt.Errorf("--platforms: %w", err)
	}
	for _, p := range o.platforms {
		// The base layer is a Linux filesystem.
		if p.OS != "linux" {
			return o, fmt.Errorf("--platforms: %s: images are linux only", p)
		}
	}
	if o.pluginPlatforms, err = parsePlatforms(*plugin); err != nil {
		return o, fmt.Errorf("--plugin-platforms: %w", err)
	}
	// Fail before minutes of compiling, not after.
	if _, err := imageRef(o.registry, servers[0].name, o.version); err != nil {
		return o, err
	}
	return o, nil
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("parsing platform %q: %w", f, err)
		}
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want os/arch[/variant]", f)
		}
		ps = append(ps, *p)
	}
	return ps, nil
}

// tagPattern is the OCI distribution spec's tag grammar; the version is
// the tag, so a version like "v1+meta" must fail here, not at push time.
var tagPattern = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// imageRef is the reference the layout tarball is annotated with. It is
// built from checked parts rather than parsed, since parsing would read a
// registry without a dot (e.g. "localhost") as a Docker Hub namespace.
func imageRef(registry, image, version string) (string, error) {
	if _, err := name.NewRegistry(registry, name.StrictValidation); err != nil {
		return "", fmt.Errorf("--registry %q: %w", registry, err)
	}
	if !tagPattern.MatchString(version) {
		return "", fmt.Errorf("--version %q is not a valid image tag", version)
	}
	return registry + "/" + image + ":" + version, nil
}

func run(ctx context.Context, o options, stdout, log io.Writer) error {
	overlay, err := writeOverlay(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "install overlay: kubectl apply --server-side -k %s (once the images are pushed to %s)\n", overlay, o.registry)
	if o.overlayOnly {
		return nil
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("reading the host CA bundle: %w", err)
	}
	tmp, err := os.MkdirTemp("", "reverser-images-")
	if err != nil {
		return fmt.Errorf("creating build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, s := range servers {
		line, err := buildServer(ctx, o, s, ca, tmp, log)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintln(stdout, line)
	}
	lines, err := buildPlugins(ctx, o, tmp, log)
	if err != nil {
		return fmt.Errorf("%s: %w", pluginName, err)
	}
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	return nil
}

// buildServer compiles s for every image platform and writes its index as
// a layout tarball; it returns the line that reports the digests.
func buildServer(ctx context.Context, o options, s server, ca []byte, tmp string, log io.Writer) (string, error) {
	ref, err := imageRef(o.registry, s.name, o.version)
	if err != nil {
		return "", err
	}
	bins := make([]platformBinary, 0, len(o.platforms))
	for _, p := range o.platforms {
		b, err := compile(ctx, o, s.pkg, s.name, p, tmp, log)
		if err != nil {
			return "", err
		}
		bins = append(bins, platformBinary{Platform: p, Binary: b})
	}
	idx, err := buildIndex(imageSpec{Name: s.name, Version: o.version, Commit: o.commit}, ca, bins)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(o.out, "images", fmt.Sprintf("%s-%s.oci.tar", s.name, o.version))
	if err := writeLayoutTar(idx, ref, dst); err != nil {
		return "", err
	}
	return describeIndex(s.name+":"+o.version, idx, dst)
}

// compile cross-compiles pkg for p into tmp and returns the binary.
func compile(ctx context.Context, o options, pkg, bin string, p v1.Platform, tmp string, log io.Writer) ([]byte, error) {
	dst := filepath.Join(tmp, platformSuffix(p), bin)
	fmt.Fprintf(log, "building %s for %s\n", bin, p)
	// -buildvcs=false: the stamped Version and Commit say what VCS stamping
	// would, without making the binary depend on the work tree's state.
	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-buildvcs=false",
		"-ldflags", ldflags(o.version, o.commit), "-o", dst, pkg)
	cmd.Env = append(os.Environ(), goEnv(p)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s for %s: %w", pkg, p, err)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		return nil, fmt.Errorf("reading built %s: %w", bin, err)
	}
	return b, nil
}

func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

func ldflags(version, commit string) string {
	return fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Commit=%s", versionPkg, version, versionPkg, commit)
}

func goEnv(p v1.Platform) []string {
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture}
	if p.Architecture == "arm" && strings.HasPrefix(p.Variant, "v") {
		env = append(env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	return env
}

// platformSuffix is p as a file-name part: linux_amd64, linux_armv7.
func platformSuffix(p v1.Platform) string {
	return p.OS + "_" + p.Architecture + p.Variant
}

// imageSpec is what, besides the binary, goes into a server's image.
type imageSpec struct {
	Name    string // binary and image name, e.g. reverser-apiserver
	Version string
	Commit  string
}

// labels returns a fresh map each call: mutate keeps what it is given.
func (s imageSpec) labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   s.Name,
		"org.opencontainers.image.version": s.Version,
		"org.opencontainers.image.source":  modulePath,
	}
	if s.Commit != "" {
		l["org.opencontainers.image.revision"] = s.Commit
	}
	return l
}

type platformBinary struct {
	Platform v1.Platform
	Binary   []byte
}

// buildIndex assembles one image per binary and the index over them. The
// base layer is built once: it is the same blob on every platform.
func buildIndex(spec imageSpec, ca []byte, bins []platformBinary) (v1.ImageIndex, error) {
	if len(bins) == 0 {
		return nil, errors.New("building an index: no platforms")
	}
	base, err := baseLayer(ca)
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.IndexAddendum, 0, len(bins))
	for _, b := range bins {
		img, err := buildImage(spec, base, b)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", b.Platform, err)
		}
		p := b.Platform
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, spec.labels()).(v1.ImageIndex), nil
}

// buildImage stacks the binary's layer on base and writes the config.
func buildImage(spec imageSpec, base v1.Layer, b platformBinary) (v1.Image, error) {
	bin, err := binaryLayer(spec.Name, b.Binary)
	if err != nil {
		return nil, err
	}
	oci := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(oci,
		mutate.Addendum{Layer: base, History: history("distroless/static equivalent base")},
		mutate.Addendum{Layer: bin, History: history("/" + spec.Name)},
	)
	if err != nil {
		return nil, fmt.Errorf("appending layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = b.Platform.OS, b.Platform.Architecture, b.Platform.Variant, b.Platform.OSVersion
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + spec.Name},
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		WorkingDir: "/home/nonroot",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=" + caFile,
		},
		Labels: spec.labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting config: %w", err)
	}
	return img, nil
}

func history(what string) v1.History {
	return v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "hack/images: " + what}
}

// entry is one file or directory of a deterministic tar; directory names
// end in "/".
type entry struct {
	name     string
	mode     int64
	uid, gid int
	data     []byte
}

func (e entry) header() *tar.Header {
	h := &tar.Header{
		Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch,
		Typeflag: tar.TypeReg, Size: int64(len(e.data)), Format: tar.FormatPAX,
	}
	if strings.HasSuffix(e.name, "/") {
		h.Typeflag, h.Size = tar.TypeDir, 0
	}
	return h
}

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
	// Go's resolver reads it: without it, DNS is asked before /etc/hosts.
	nsswitch = "hosts: files dns\n"
)

// baseEntries is the distroless/static filesystem the servers need.
func baseEntries(ca []byte) []entry {
	return []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte(nsswitch)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonroot, gid: nonroot},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
	}
}

func baseLayer(ca []byte) (v1.Layer, error) {
	l, err := layerFromEntries(baseEntries(ca))
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	return l, nil
}

func binaryLayer(name string, bin []byte) (v1.Layer, error) {
	l, err := layerFromEntries([]entry{{name: name, mode: 0o755, data: bin}})
	if err != nil {
		return nil, fmt.Errorf("binary layer: %w", err)
	}
	return l, nil
}

// layerFromEntries compresses once here, with a fixed level, so the
// layer's digest does not depend on how ggcr would compress it.
func layerFromEntries(entries []entry) (v1.Layer, error) {
	gz, err := tarGz(entries)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("making layer: %w", err)
	}
	return l, nil
}

// tarGz writes entries sorted by name, so callers' order does not matter.
func tarGz(entries []entry) ([]byte, error) {
	sorted := append([]entry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, fmt.Errorf("starting gzip: %w", err)
	}
	tw := tar.NewWriter(zw)
	for _, e := range sorted {
		if err := tw.WriteHeader(e.header()); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar data %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("closing gzip: %w", err)
	}
	return buf.Bytes(), nil
}

// writeLayoutTar writes idx as an OCI image layout, its index.json entry
// naming ref, and tars the layout to dst. io.containerd.image.name is the
// name docker load and ctr import give the image; ref.name is the OCI one,
// which skopeo and podman match.
func writeLayoutTar(idx v1.ImageIndex, ref, dst string) error {
	dir, err := os.MkdirTemp("", "reverser-layout-")
	if err != nil {
		return fmt.Errorf("creating layout directory: %w", err)
	}
	defer os.RemoveAll(dir)
	top := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: idx, Descriptor: v1.Descriptor{
		Annotations: map[string]string{
			"org.opencontainers.image.ref.name": ref,
			"io.containerd.image.name":          ref,
		},
	}})
	if _, err := layout.Write(dir, top); err != nil {
		return fmt.Errorf("writing OCI layout: %w", err)
	}
	return writeFileAtomic(dst, func(w io.Writer) error { return tarDir(w, dir) })
}

// tarDir tars dir's contents with fixed metadata; WalkDir's lexical order
// makes the entry order fixed too.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		return tarFile(tw, filepath.ToSlash(rel), path, d)
	})
	if err != nil {
		return fmt.Errorf("tarring %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing tar: %w", err)
	}
	return nil
}

func tarFile(tw *tar.Writer, name, path string, d fs.DirEntry) error {
	if d.IsDir() {
		return tw.WriteHeader(entry{name: name + "/", mode: 0o755}.header())
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	h := entry{name: name, mode: 0o644}.header()
	h.Size = info.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// writeFileAtomic writes through a temporary file so a failed run leaves
// no truncated artifact under dst's name.
func writeFileAtomic(dst string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(dst), err)
	}
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return fmt.Errorf("creating temporary file for %s: %w", dst, err)
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", dst, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", dst, err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("renaming to %s: %w", dst, err)
	}
	return nil
}

// describeIndex is the report line: index digest, then each platform's.
func describeIndex(label string, idx v1.ImageIndex, path string) (string, error) {
	d, err := idx.Digest()
	if err != nil {
		return "", fmt.Errorf("index digest: %w", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", fmt.Errorf("index manifest: %w", err)
	}
	parts := make([]string, 0, len(m.Manifests))
	for _, desc := range m.Manifests {
		parts = append(parts, fmt.Sprintf("%s %s", desc.Platform, desc.Digest))
	}
	return fmt.Sprintf("%s index %s (%s)  %s", label, d, strings.Join(parts, ", "), path), nil
}

// buildPlugins compiles and archives the plugin for every plugin platform
// and writes SHA256SUMS over the archives; it returns the report lines.
func buildPlugins(ctx context.Context, o options, tmp string, log io.Writer) ([]string, error) {
	dir := filepath.Join(o.out, "release")
	sums := make(map[string]string, len(o.pluginPlatforms))
	lines := make([]string, 0, len(o.pluginPlatforms))
	for _, p := range o.pluginPlatforms {
		bin, err := compile(ctx, o, pluginPkg, pluginName, p, tmp, log)
		if err != nil {
			return nil, err
		}
		archive, err := pluginArchive(bin, p)
		if err != nil {
			return nil, fmt.Errorf("archive for %s: %w", p, err)
		}
		file := fmt.Sprintf("%s_%s_%s.tar.gz", pluginName, o.version, platformSuffix(p))
		path := filepath.Join(dir, file)
		if err := writeFileAtomic(path, func(w io.Writer) error { _, err := w.Write(archive); return err }); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(archive)
		sums[file] = hex.EncodeToString(sum[:])
		lines = append(lines, fmt.Sprintf("%s:%s %s sha256:%s  %s", pluginName, o.version, p, sums[file], path))
	}
	if err := writeFileAtomic(filepath.Join(dir, "SHA256SUMS"), func(w io.Writer) error { return writeSums(w, sums) }); err != nil {
		return nil, err
	}
	return lines, nil
}

// pluginArchive is a .tar.gz of the plugin binary alone, as krew expects.
func pluginArchive(bin []byte, p v1.Platform) ([]byte, error) {
	n := pluginName
	if p.OS == "windows" {
		n += ".exe"
	}
	return tarGz([]entry{{name: n, mode: 0o755, data: bin}})
}

// writeSums writes sha256sum's format, sorted, so `sha256sum -c` checks it.
func writeSums(w io.Writer, sums map[string]string) error {
	files := make([]string, 0, len(sums))
	for f := range sums {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if _, err := fmt.Fprintf(w, "%s  %s\n", sums[f], f); err != nil {
			return err
		}
	}
	return nil
}

// deployBase is the kustomize base the overlay builds on, relative to the
// repository root, where make runs this command.
const deployBase = "artifacts/deploy"

// writeOverlay writes <out>/deploy/kustomization.yaml, deployBase with its
// images named as built, and returns the folder.
func writeOverlay(o options) (string, error) {
	dir := filepath.Join(o.out, "deploy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the install overlay: %w", err)
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	absBase, err := filepath.Abs(deployBase)
	if err != nil {
		return "", err
	}
	base, err := filepath.Rel(absDir, absBase)
	if err != nil {
		return "", fmt.Errorf("locating %s from %s: %w", deployBase, dir, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by `make images`: %s with the images it built.\n", deployBase)
	fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\nimages:\n", filepath.ToSlash(base))
	for _, s := range servers {
		if _, err := imageRef(o.registry, s.name, o.version); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "- name: %s\n  newName: %s/%s\n  newTag: %s\n", s.name, o.registry, s.name, o.version)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("writing the install overlay: %w", err)
	}
	return dir, nil
}
