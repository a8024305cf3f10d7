package mirror

import (
	"reverser.dev/reverser/pkg/worker"
)

// suspension is a suspended GitTarget's last mirror, ending in its worker
// (spec.suspend, #29): the streams are stopped, and the mirror's reference
// to the worker is kept until the worker has committed and pushed what the
// target received, so the worker is not closed with the target's windows.
// Its fields are guarded by Controller.mu.
type suspension struct {
	workerKey string
	// ended is how the worker ended it; empty while it works.
	ended worker.Suspension
}

// suspend stops key's mirror, if one runs, and hands its target to the
// worker to end once pushed. It says whether that is still under way. A
// suspension that ended gives its worker reference back here, on the
// reconcile its end enqueues.
func (c *Controller) suspend(key string) (ending bool) {
	c.mu.Lock()
	m, running := c.mirrors[key]
	delete(c.mirrors, key)
	s := c.suspensions[key]
	var ended *suspension // done with: its worker reference goes back
	if s != nil && (running || s.ended != "") {
		ended, s = s, nil
		delete(c.suspensions, key)
	}
	var w *runningWorker
	if running {
		w = c.workers.get(m.workerKey)
		s = &suspension{workerKey: m.workerKey}
		c.suspensions[key] = s
	}
	ending = s != nil
	c.mu.Unlock()
	if ended != nil {
		c.release(ended.workerKey)
	}
	if !running {
		return ending
	}
	for _, st := range m.streams {
		st.Stop()
	}
	if w == nil {
		c.mu.Lock()
		s.ended = worker.SuspensionDone
		c.mu.Unlock()
		c.queue.Add(key)
		return true
	}
	w.Suspend(c.ctx, key, func(how worker.Suspension) {
		c.mu.Lock()
		s.ended = how
		c.mu.Unlock()
		c.queue.Add(key) // gives the reference back
	})
	return true
}

// resumed gives back the worker reference of key's suspension, if any:
// called once the resumed mirror holds its own, so that a worker the
// suspension was still ending in is not closed in between (its SetTarget
// cancels the suspension, windows intact).
func (c *Controller) resumed(key string) {
	c.mu.Lock()
	s := c.suspensions[key]
	delete(c.suspensions, key)
	c.mu.Unlock()
	if s != nil {
		c.release(s.workerKey)
	}
}
