package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-ai/switchboard/pkg/catalog"
	"github.com/switchboard-ai/switchboard/pkg/numfmt"
	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// DefaultEvery is how often `activity tail` asks for new records.
const DefaultEvery = 2 * time.Second

// maxPages bounds the pages one poll reads: more new records than that
// between two polls are skipped, and said so.
const maxPages = 20

func activityTailCommand() *command {
	return &command{name: "activity tail", summary: "follow a tenant's requests as they are recorded", dial: true,
		about: "Prints a tenant's last requests from the decider's activity log, then each new one as it is recorded,\n" +
			"until interrupted (Ctrl-C). The tenant is named by --tenant, or by one of its API keys (--api-key).\n" +
			"With -o json, one JSON record a line.",
		setup: func(fs *flag.FlagSet) func(context.Context, *run) error {
			tenant := fs.String("tenant", "", "the tenant whose requests to follow")
			key := fs.String("api-key", "", "an API key of the tenant, instead of --tenant")
			model := fs.String("model", "", "only requests for this model")
			last := fs.Int("n", 10, "how many past requests to print first (0 to 500)")
			return func(ctx context.Context, r *run) error {
				if err := r.positional(0, 0); err != nil {
					return err
				}
				id := &switchboardv1.Identity{TenantId: *tenant}
				switch {
				case *key != "" && *tenant != "":
					return usagef("--tenant and --api-key exclude each other: the key names its tenant")
				case *key != "":
					id = &switchboardv1.Identity{ApiKeySha256: catalog.HashKey(*key)}
				case *tenant == "":
					return usagef("name whose requests to follow: --tenant ID or --api-key KEY (make run's tenant is demo)")
				}
				if *last < 0 || *last > 500 {
					return usagef("-n %d: between 0 and 500", *last)
				}
				c, done, err := r.client() //nolint:contextcheck // credentials outlive any one call; each handshake has its own context
				if err != nil {
					return err
				}
				defer done()
				t := &tail{r: r, c: c, req: &switchboardv1.ListActivityRequest{Identity: id, Model: *model}}
				return t.run(ctx, *last)
			}
		}}
}

// tail follows the activity log: each poll reads the records from the
// newest one seen on, newest first, page by page through the cursor, and
// prints the unseen ones oldest first.
type tail struct {
	r   *run
	c   switchboardv1.DeciderClient
	req *switchboardv1.ListActivityRequest
	// since is the newest record's time seen; atSince the ids seen at it,
	// since a later record can share its time.
	since   *timestamppb.Timestamp
	atSince map[string]bool
	header  bool
}

func (t *tail) run(ctx context.Context, last int) error {
	first, err := t.page(ctx, &switchboardv1.ListActivityRequest{Identity: t.req.GetIdentity(), Model: t.req.GetModel(), Limit: int32(max(last, 1))}) //nolint:gosec // bounded
	if err != nil {
		return err
	}
	recs := first.GetRecords()
	if last == 0 {
		recs = nil
	}
	t.print(recs)
	t.advance(first.GetRecords())
	every := t.r.env.Every
	if every <= 0 {
		every = DefaultEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		fresh, err := t.poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		t.print(fresh)
		t.advance(fresh)
	}
}

func (t *tail) page(ctx context.Context, req *switchboardv1.ListActivityRequest) (*switchboardv1.ListActivityResponse, error) {
	return call(ctx, t.r, func(ctx context.Context) (*switchboardv1.ListActivityResponse, error) {
		return t.c.ListActivity(ctx, req)
	})
}

// poll returns the records not seen yet, newest first.
func (t *tail) poll(ctx context.Context) ([]*switchboardv1.ActivityRecord, error) {
	req := &switchboardv1.ListActivityRequest{Identity: t.req.GetIdentity(), Model: t.req.GetModel(), StartTime: t.since, Limit: 500}
	var out []*switchboardv1.ActivityRecord
	for range maxPages {
		resp, err := t.page(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, rec := range resp.GetRecords() {
			if !t.atSince[rec.GetId()] {
				out = append(out, rec)
			}
		}
		if resp.GetNextCursor() == "" {
			return out, nil
		}
		req.Cursor = resp.GetNextCursor()
	}
	fmt.Fprintf(t.r.env.Stderr, "switchboard: more than %s new requests since the last poll; showing the newest\n", numfmt.Int(maxPages*500))
	return out, nil
}

// advance moves the resume point to the newest of recs (newest first).
func (t *tail) advance(recs []*switchboardv1.ActivityRecord) {
	for _, rec := range recs {
		ts := rec.GetCreateTime()
		switch {
		case t.since == nil || ts.AsTime().After(t.since.AsTime()):
			t.since, t.atSince = ts, map[string]bool{rec.GetId(): true}
		case ts.AsTime().Equal(t.since.AsTime()):
			t.atSince[rec.GetId()] = true
		}
	}
}

// print writes recs (newest first) oldest first.
func (t *tail) print(recs []*switchboardv1.ActivityRecord) {
	w := t.r.env.Stdout
	for _, rec := range slices.Backward(recs) {
		if t.r.json() {
			_ = writeJSONLine(w, rec)
			continue
		}
		if !t.header {
			fmt.Fprintf(w, "%-8s  %-6s  %-24s  %-12s  %-9s  %9s  %9s  %15s  %s\n", "TIME", "STATUS", "MODEL", "PROVIDER", "ATTEMPTS", "TTFT", "DURATION", "TOKENS IN/OUT", "COST")
			t.header = true
		}
		status := name(rec.GetStatus())
		if rec.GetHttpStatus() != 0 && rec.GetStatus() != switchboardv1.CallStatus_CALL_STATUS_OK {
			status = fmt.Sprint(rec.GetHttpStatus())
		}
		u := rec.GetUsage()
		fmt.Fprintf(w, "%-8s  %-6s  %-24s  %-12s  %-9d  %9s  %9s  %15s  %s", rec.GetCreateTime().AsTime().Local().Format(time.TimeOnly), status,
			rec.GetModel(), rec.GetProvider(), len(rec.GetAttempts()), dur(rec.GetTtft()), dur(rec.GetDuration()),
			numfmt.Int(u.GetInputTokens())+"/"+numfmt.Int(u.GetOutputTokens()), usd(rec.GetCostUsd()))
		if e := rec.GetError(); e != "" {
			fmt.Fprint(w, "  ", strings.ReplaceAll(e, "\n", " "))
		}
		fmt.Fprintln(w)
	}
}

// writeJSONLine writes rec as one line of JSON (snake_case field names).
func writeJSONLine(w io.Writer, rec *switchboardv1.ActivityRecord) error {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(rec)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = buf.WriteTo(w)
	return err
}
