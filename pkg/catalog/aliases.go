package catalog

import (
	"fmt"
	"slices"
	"strings"
)

// AliasWildcard ends an alias that is a prefix pattern: "claude-sonnet-4-5*"
// is every name starting "claude-sonnet-4-5", that name itself included,
// so one pattern covers an agent's undated name and each of its dated ones
// ("claude-sonnet-4-5-20250929").
const AliasWildcard = "*"

// Resolver finds the catalog model a client's model name means: the model
// with that id, else the model with that exact alias, else the model whose
// longest prefix pattern matches it. It is the one place a client's model
// name is looked up; build it once per catalog and share it (it is
// immutable, safe for concurrent use).
type Resolver struct {
	exact map[string]string // ids and exact aliases → model id
	// patterns are the prefix patterns, longest prefix first.
	patterns []aliasPattern
}

type aliasPattern struct{ prefix, id string }

// NewResolver returns the resolver of models' ids and aliases. For models
// that Parse did not validate, the first claim of a name or pattern wins.
func NewResolver(models []Model) *Resolver {
	r := &Resolver{exact: make(map[string]string, len(models))}
	for _, m := range models {
		if _, dup := r.exact[m.ID]; !dup && m.ID != "" {
			r.exact[m.ID] = m.ID
		}
	}
	seen := map[string]bool{}
	for _, m := range models {
		for _, a := range m.Aliases {
			prefix, pattern := strings.CutSuffix(a, AliasWildcard)
			switch {
			case a == "" || prefix == "":
			case pattern && !seen[prefix]:
				seen[prefix] = true
				r.patterns = append(r.patterns, aliasPattern{prefix: prefix, id: m.ID})
			case !pattern:
				if _, dup := r.exact[a]; !dup {
					r.exact[a] = m.ID
				}
			}
		}
	}
	slices.SortStableFunc(r.patterns, func(a, b aliasPattern) int { return len(b.prefix) - len(a.prefix) })
	return r
}

// Resolver returns the resolver of the catalog's model names.
func (c *Catalog) Resolver() *Resolver { return NewResolver(c.Models) }

// Resolve returns the id of the model name means, and false when no model
// has that id or alias. An id or exact alias wins over a pattern, and a
// longer pattern over a shorter one. The name is matched as sent: case
// matters, and a routing suffix (":floor") must be cut off first.
func (r *Resolver) Resolve(name string) (id string, ok bool) {
	if id, ok := r.exact[name]; ok {
		return id, true
	}
	for _, p := range r.patterns {
		if strings.HasPrefix(name, p.prefix) {
			return p.id, true
		}
	}
	return "", false
}

// validateAliases checks every model's aliases once ids are known (ids maps
// each model id to its path): an alias is a name a client could send, or a
// prefix ending in the one trailing '*', and no two models may claim the
// same name or the same pattern, nor an alias be a model's id.
func validateAliases(models []Model, ids map[string]string, lines map[string]int, bad func(string, string, ...any)) {
	at := func(path string) string {
		if l := line(lines, path); l > 0 {
			return fmt.Sprintf("%s (line %d)", path, l)
		}
		return path
	}
	claimed := map[string]string{} // alias, pattern included → its path
	for i, m := range models {
		for j, a := range m.Aliases {
			ap := fmt.Sprintf("models[%d].aliases[%d]", i, j)
			prefix, _ := strings.CutSuffix(a, AliasWildcard)
			switch {
			case a == "":
				bad(ap, "must not be empty")
			case strings.ContainsAny(a, " \t\r\n:"):
				bad(ap, "%q must not contain spaces or ':' (':' starts a routing suffix such as :floor)", a)
			case prefix == "":
				bad(ap, "%q matches every model name: a pattern needs a prefix before '*', e.g. \"claude-sonnet-4-5*\"", a)
			case strings.Contains(prefix, AliasWildcard):
				bad(ap, "%q: '*' may only end an alias, as a prefix pattern such as \"claude-sonnet-4-5*\"", a)
			case ids[a] != "" && ids[a] == fmt.Sprintf("models[%d]", i):
				bad(ap, "%q is this model's own id", a)
			case ids[a] != "":
				bad(ap, "%q is the id of %s: an alias may not name another model", a, at(ids[a]+".id"))
			case claimed[a] != "":
				bad(ap, "%q is already claimed by %s", a, at(claimed[a]))
			default:
				claimed[a] = ap
			}
		}
	}
}
