package app

import (
	"context"
	"errors"

	switchboardv1 "github.com/switchboard-ai/switchboard/proto/switchboard/v1"
)

// onActivity hands the edges' activity records to the activity sink, which
// stores them and settles their hedges (activity.Sink); Report streams may
// start before it exists.
func (d *Decider) onActivity(ctx context.Context, edge *switchboardv1.EdgeHello, records []*switchboardv1.ActivityRecord) error {
	sink := d.sink.Load()
	if sink == nil {
		return errors.New("the activity log is not open yet")
	}
	return sink.Add(ctx, edge, records)
}
