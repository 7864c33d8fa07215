package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
	"github.com/switchboard-ai/switchboard/services/decider/internal/gate"
	"github.com/switchboard-ai/switchboard/services/decider/internal/routing"
)

// problem is one thing wrong with a catalog, for -o json.
type problem struct {
	Line    int    `json:"line,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// validation is catalog validate's answer, for -o json.
type validation struct {
	File      string    `json:"file"`
	Valid     bool      `json:"valid"`
	Problems  []problem `json:"problems,omitempty"`
	Models    int       `json:"models"`
	Endpoints int       `json:"endpoints"`
	Tenants   int       `json:"tenants"`
	Callers   int       `json:"callers"`
}

// errValidation is catalog validate's failure once its problems are printed.
var errValidation = errors.New("the catalog is not valid")

func catalogValidateCommand() *command {
	return &command{name: "catalog validate", args: "FILE", summary: "check a catalog file offline, as the decider would before applying it",
		about: "Checks FILE with the decider's own catalog gate (parsing, validation, the rate-limit broker's configuration,\n" +
			"the key set) without calling any decider. Every problem is listed with its line; exit 1 when there is one.",
		setup: func(*flag.FlagSet) func(context.Context, *run) error {
			return func(_ context.Context, r *run) error {
				if err := r.positional(1, 1); err != nil {
					return err
				}
				file := r.args[0]
				data, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				v := validation{File: file}
				views, err := gate.New(routing.Sources{}).Prepare(data)
				if err != nil {
					v.Problems = problems(err)
				} else {
					c := views.Catalog
					v.Valid, v.Models, v.Tenants, v.Callers = true, len(c.Models), len(c.Tenants), len(c.Callers)
					for _, m := range c.Models {
						v.Endpoints += len(m.Endpoints)
					}
				}
				if r.json() {
					if err := writeJSONValue(r.env.Stdout, v); err != nil {
						return err
					}
				} else {
					printValidation(r, v)
				}
				if !v.Valid {
					return errValidation
				}
				return nil
			}
		}}
}

func printValidation(r *run, v validation) {
	w := r.env.Stdout
	if v.Valid {
		fmt.Fprintf(w, "%s: valid: %d models, %d endpoints, %d tenants, %d callers\n", v.File, v.Models, v.Endpoints, v.Tenants, v.Callers)
		return
	}
	for _, p := range v.Problems {
		switch {
		case p.Line > 0:
			fmt.Fprintf(w, "%s:%d: %s: %s\n", v.File, p.Line, p.Field, p.Message)
		case p.Field != "":
			fmt.Fprintf(w, "%s: %s: %s\n", v.File, p.Field, p.Message)
		default:
			fmt.Fprintf(w, "%s: %s\n", v.File, p.Message)
		}
	}
}

// problems lists the problems err joins, each with its line when known.
func problems(err error) []problem {
	var out []problem
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var ce *catalog.Error
		if errors.As(err, &ce) {
			out = append(out, problem{Line: ce.Line, Field: ce.Field, Message: ce.Msg})
			return
		}
		out = append(out, problem{Message: err.Error()})
	}
	walk(err)
	return out
}

func catalogShowCommand() *command {
	return &command{name: "catalog show", summary: "print the catalog the decider applied (digests elided)", dial: true,
		about: "Prints the catalog the decider has applied: its etcd revision and its YAML, comments kept,\n" +
			"with every credential digest (tokens_sha256, api_keys_sha256, an API key's sha256) elided.",
		setup: func(*flag.FlagSet) func(context.Context, *run) error {
			return func(ctx context.Context, r *run) error {
				if err := r.positional(0, 0); err != nil {
					return err
				}
				resp, err := once(ctx, r, func(ctx context.Context, c switchboardv1.DeciderClient) (*switchboardv1.GetCatalogResponse, error) {
					return c.GetCatalog(ctx, &switchboardv1.GetCatalogRequest{})
				})
				if err != nil {
					return err
				}
				if r.json() {
					return writeJSON(r.env.Stdout, resp)
				}
				fmt.Fprintf(r.env.Stdout, "# catalog revision %d, applied by the decider at %s\n", resp.GetRevision(), resp.GetReplica())
				_, err = fmt.Fprint(r.env.Stdout, strings.TrimRight(resp.GetYaml(), "\n")+"\n")
				return err
			}
		}}
}
