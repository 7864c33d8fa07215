package tests

// The overlays of deploy/k8s are rendered here with kustomize's Go API
// (tests/k8srender), as `kubectl apply -k` renders them, and every check of
// deploy_test.go runs on each rendering. The kustomizations themselves are
// checked too: every manifest and patch in a kustomization's folder is listed
// by it, and every kustomization is part of an overlay.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/switchboard-ai/switchboard/tests/k8srender"
)

// deployOverlaySpec is what an overlay must install.
type deployOverlaySpec struct {
	// regions are the regions whose edges it runs, one Deployment each.
	regions []string
	// production requires what losing a node must not break: etcd members on
	// distinct nodes, every replica's state on a PersistentVolumeClaim, the
	// edges autoscaled on requests in flight as well as CPU.
	production bool
}

// deployOverlays are the overlays of deploy/k8s/overlays; a new one needs an
// entry here (the test fails otherwise).
var deployOverlays = map[string]deployOverlaySpec{
	"region-us-east": {regions: []string{"us-east"}},
	"region-eu-west": {regions: []string{"eu-west"}},
	"production":     {regions: []string{"eu-west", "us-east"}, production: true},
}

// deployRendered caches each overlay's rendering: TestDeployChecksCatchBreakage
// decodes a fresh bundle from it per case.
var deployRendered = map[string][]byte{}

func renderDeployOverlay(overlay string) ([]byte, error) {
	if y, ok := deployRendered[overlay]; ok {
		return y, nil
	}
	y, err := k8srender.Render(filepath.Join(deployDir, k8srender.OverlaysDir, overlay))
	if err != nil {
		return nil, err
	}
	deployRendered[overlay] = y
	return y, nil
}

func TestDeploy(t *testing.T) {
	names, err := k8srender.Overlays(deployDir)
	require.NoError(t, err)
	require.ElementsMatch(t, deploySorted(deployKeys(deployOverlays)), names,
		"every folder of deploy/k8s/overlays must be in deployOverlays, and every entry a folder")
	for _, overlay := range names {
		t.Run(overlay, func(t *testing.T) {
			b, err := loadDeployBundle(overlay)
			require.NoError(t, err, "the overlay must render, and every document decode strictly into its Kubernetes type")
			require.NotEmpty(t, b.docs)
			for _, tt := range deployChecks {
				t.Run(tt.name, func(t *testing.T) {
					require.NoError(t, tt.check(b))
				})
			}
		})
	}
}

func deployKeys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// deployKustomization is the part of a kustomization.yaml the checks read.
type deployKustomization struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
	Patches    []struct {
		Path string `yaml:"path"`
	} `yaml:"patches"`
}

// deployTree is every kustomization of deploy/k8s, by folder (relative,
// slash-separated), with the YAML files beside each.
type deployTree struct {
	kusts map[string]*deployKustomization
	files map[string][]string // folder -> its .yaml files but kustomization.yaml
}

func loadDeployTree(root string) (*deployTree, error) {
	t := &deployTree{kusts: map[string]*deployKustomization{}, files: map[string][]string{}}
	var errs []error
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		dir, base := path.Split(rel)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case base == "README.md":
		case base == "kustomization.yaml":
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			var k deployKustomization
			if err := yaml.Unmarshal(data, &k); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", rel, err))
			}
			t.kusts[dir] = &k
		case strings.HasSuffix(base, ".yaml"):
			t.files[dir] = append(t.files[dir], base)
		default:
			errs = append(errs, fmt.Errorf("%s: unexpected file: manifests and patches end in .yaml, documentation goes in README.md", rel))
		}
		return nil
	})
	return t, errors.Join(err, errors.Join(errs...))
}

// checkDeployKustomization requires every manifest and patch to be listed by
// the kustomization of its folder (or kubectl apply -k skips it), and every
// kustomization to be part of an overlay.
func checkDeployKustomization(b *deployBundle) error {
	t := b.tree
	var errs []error
	for dir := range t.files {
		if t.kusts[dir] == nil {
			errs = append(errs, fmt.Errorf("%s: YAML files but no kustomization.yaml", dir))
		}
	}
	reached := map[string]bool{}
	var reach func(dir string)
	reach = func(dir string) {
		if reached[dir] {
			return
		}
		reached[dir] = true
		if k := t.kusts[dir]; k != nil {
			for _, r := range k.Resources {
				if sub := path.Clean(path.Join(dir, r)); t.kusts[sub] != nil {
					reach(sub)
				}
			}
		}
	}
	for overlay := range deployOverlays {
		reach(path.Join(k8srender.OverlaysDir, overlay))
	}
	for _, dir := range deploySorted(deployKeys(t.kusts)) {
		k := t.kusts[dir]
		if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
			errs = append(errs, fmt.Errorf("%s/kustomization.yaml: apiVersion/kind %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", dir, k.APIVersion, k.Kind))
		}
		if !reached[dir] {
			errs = append(errs, fmt.Errorf("%s: no overlay includes this kustomization", dir))
		}
		listed := map[string]bool{}
		for _, r := range k.Resources {
			if listed[r] {
				errs = append(errs, fmt.Errorf("%s/kustomization.yaml: %s is listed twice", dir, r))
			}
			listed[r] = true
		}
		for _, p := range k.Patches {
			if p.Path != "" {
				listed[p.Path] = true
			}
		}
		for _, f := range t.files[dir] {
			if !listed[f] {
				errs = append(errs, fmt.Errorf("%s/%s is not listed in its kustomization.yaml (resources or patches), so kubectl apply -k skips it", dir, f))
			}
		}
		for r := range listed {
			if !strings.Contains(r, "/") && !slices.Contains(t.files[dir], r) {
				errs = append(errs, fmt.Errorf("%s/kustomization.yaml: %s is not a file of the folder", dir, r))
			}
		}
	}
	return errors.Join(errs...)
}
