package app

// QueuedRequests is how many requests wait now in the workload classes'
// admission queues of the broker this replica holds, every class and
// tenant together (0 on a replica that does not own the broker).
func (d *Decider) QueuedRequests() int {
	n := 0
	for _, q := range d.broker.QueueDepths() {
		n += q.Depth
	}
	return n
}
