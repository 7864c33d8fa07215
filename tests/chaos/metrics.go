package chaos

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
)

// admissionsMetric counts a decider's reservations by where they were
// admitted (label path: owner, lease, forwarded).
const admissionsMetric = "switchboard_decider_admissions_total"

// admissions reads decider i's admission counters from its admin
// listener's /metrics (Prometheus text). They count from the process's
// start: a restart begins again at zero.
func (s *system) admissions(ctx context.Context, hc *http.Client, i int) (Admissions, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.deciders[i].admin+"/metrics", nil)
	if err != nil {
		return Admissions{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Admissions{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return Admissions{}, fmt.Errorf("d%d /metrics: %s", i, resp.Status)
	}
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return Admissions{}, fmt.Errorf("d%d /metrics: %w", i, err)
	}
	var a Admissions
	for _, m := range fams[admissionsMetric].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() != "path" {
				continue
			}
			v := m.GetCounter().GetValue()
			switch l.GetValue() {
			case "owner":
				a.Owner += v
			case "lease":
				a.Lease += v
			case "forwarded":
				a.Forwarded += v
			}
		}
	}
	return a, nil
}

// add sums two counts.
func (a Admissions) add(b Admissions) Admissions {
	return Admissions{Owner: a.Owner + b.Owner, Lease: a.Lease + b.Lease, Forwarded: a.Forwarded + b.Forwarded}
}

// sub is a less b.
func (a Admissions) sub(b Admissions) Admissions {
	return Admissions{Owner: a.Owner - b.Owner, Lease: a.Lease - b.Lease, Forwarded: a.Forwarded - b.Forwarded}
}
