package catalog

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Elided is what Elide writes in place of a credential digest.
const Elided = "<elided>"

// digestFields are the catalog's fields whose values are credential
// digests (a caller's tokens_sha256, a tenant's api_keys_sha256, an API
// key's sha256): not secrets themselves, but what a key set or a caller
// list is checked against, so not for display.
var digestFields = map[string]bool{"tokens_sha256": true, "api_keys_sha256": true, "sha256": true}

// Elide returns the catalog YAML data with the value of every credential
// digest replaced by Elided (each item of a list of digests, so their
// count stays readable), comments and order kept.
func Elide(data []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	elideNode(&doc)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	return buf.Bytes(), nil
}

func elideNode(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; digestFields[k.Value] {
				elideValue(v)
			}
		}
	}
	for _, c := range n.Content {
		elideNode(c)
	}
}

// elideValue replaces a scalar's value, or every scalar of a sequence.
func elideValue(v *yaml.Node) {
	switch v.Kind {
	case yaml.ScalarNode:
		v.Value, v.Tag, v.Style = Elided, "!!str", 0
	case yaml.SequenceNode:
		for _, c := range v.Content {
			elideValue(c)
		}
	case yaml.AliasNode:
		// The anchor it names holds the digests, wherever it stands.
		if v.Alias != nil {
			elideValue(v.Alias)
		}
	case yaml.MappingNode, yaml.DocumentNode:
	}
}
