package app

import (
	"context"

	"github.com/switchboard-ai/switchboard/services/decider/internal/experiment"
)

// loadExperiments builds the switchback experiment manager and loads the
// stored experiment with this replica's saved figures of it; it returns
// the etcd revision its watch starts from. A stored experiment that cannot
// be read is logged and left out: routing does not depend on it.
func (d *Decider) loadExperiments(ctx context.Context) (int64, error) {
	d.exps = experiment.New(experiment.Options{
		Client: d.store.Client(), Replica: d.cfg.ID, Logger: d.logger.With("component", "experiment"),
		Now: d.cfg.Now, SaveInterval: d.cfg.ExperimentSaveInterval,
		Limits: experiment.Limits{MinBlock: d.cfg.ExperimentMinBlock},
	})
	rev, err := d.exps.Load(ctx)
	if err != nil && rev == 0 {
		return 0, err // etcd not readable
	}
	if err != nil {
		d.logger.Error("stored experiment not followed", "err", err)
	}
	return rev, nil
}
