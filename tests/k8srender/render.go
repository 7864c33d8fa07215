// Package k8srender renders the Kubernetes overlays of deploy/k8s with
// kustomize's own Go API (krusty, as `kubectl apply -k` does), so the tests
// check exactly what would be applied and `make k8s` needs no kustomize
// binary.
package k8srender

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// OverlaysDir is where the installable overlays live, relative to deploy/k8s.
const OverlaysDir = "overlays"

// Render builds the kustomization in dir and returns its resources as one
// multi-document YAML stream, in kustomize's output order.
func Render(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return out, nil
}

// Overlays lists the overlays under deployDir (deploy/k8s): the folders of
// OverlaysDir, by name.
func Overlays(deployDir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(deployDir, OverlaysDir))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
