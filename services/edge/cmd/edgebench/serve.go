package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// serveTargets writes, for each target and for streaming and not, the
// request every load sends, in the target format of vegeta (an independent
// load generator): <dir>/<target>-<stream|plain>.txt, with the body beside
// it. It then prints the PIDs whose CPU belongs to each target and waits
// until ctx ends, so another tool can drive the same three targets.
func serveTargets(ctx context.Context, dir string, targets []target, w io.Writer) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	for _, t := range targets {
		for _, stream := range []bool{false, true} {
			kind := "plain"
			if stream {
				kind = "stream"
			}
			req := newRequest(ctx, t.url, t.key, t.model, stream)
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return err
			}
			bodyPath, err := filepath.Abs(filepath.Join(dir, t.name+"-"+kind+".json"))
			if err != nil {
				return err
			}
			if err := os.WriteFile(bodyPath, body, 0o600); err != nil {
				return err
			}
			spec := fmt.Sprintf("POST %s\nContent-Type: application/json\nAuthorization: Bearer %s\n@%s\n", t.url, t.key, bodyPath)
			if err := os.WriteFile(filepath.Join(dir, t.name+"-"+kind+".txt"), []byte(spec), 0o600); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "%-12s %s pids %v\n", t.name, t.url, t.pids)
	}
	fmt.Fprintf(w, "ready: request files in %s; interrupt to stop\n", dir)
	<-ctx.Done()
	return nil
}
