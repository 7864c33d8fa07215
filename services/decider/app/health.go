package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-ai/switchboard/pkg/readiness"
	"github.com/switchboard-ai/switchboard/services/decider/internal/store"
)

// admissionCheckEvery is how often the decider checks that it can admit,
// and etcdCheckTimeout bounds the etcd read of each check.
const (
	admissionCheckEvery = 500 * time.Millisecond
	etcdCheckTimeout    = time.Second
)

// watchAdmission keeps readiness.AdmissionService's health true to whether
// this replica can admit requests now: etcd answers a linearizable read,
// and the admission (a known owner; the owner's snapshots saved) is healthy.
// The first check is made before it returns, so the status exists once the
// decider serves; the next ones every admissionCheckEvery, until ctx ends.
func (d *Decider) watchAdmission(ctx context.Context) {
	last := d.checkAdmission(ctx, nil, true)
	d.wg.Go(func() {
		tick := time.NewTicker(admissionCheckEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			last = d.checkAdmission(ctx, last, false)
		}
	})
}

// checkAdmission sets the admission health from canAdmit when it changed
// from last (or on the first check), logs the change, and returns it.
func (d *Decider) checkAdmission(ctx context.Context, last error, first bool) error {
	err := d.canAdmit(ctx)
	if ctx.Err() != nil || (!first && (err == nil) == (last == nil)) {
		return err
	}
	st := healthpb.HealthCheckResponse_SERVING
	if err != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
		d.logger.Error("cannot admit requests; admission health NOT_SERVING", "err", err)
	} else if !first {
		d.logger.Info("admitting requests again; admission health SERVING")
	}
	d.srv.Health.SetServingStatus(readiness.AdmissionService, st)
	return err
}

// canAdmit is nil when this replica can admit requests now, else why not:
// etcd answers, the admission is healthy, and the broker's owner, when
// another replica, says it admits.
func (d *Decider) canAdmit(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, etcdCheckTimeout)
	defer cancel()
	if _, err := d.store.Client().Get(cctx, store.CatalogKey, clientv3.WithCountOnly()); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("etcd does not answer within %s", etcdCheckTimeout)
		}
		return fmt.Errorf("etcd: %w", err)
	}
	if err := d.adm.Healthy(); err != nil {
		return err
	}
	return d.adm.CheckOwner(ctx, etcdCheckTimeout)
}
