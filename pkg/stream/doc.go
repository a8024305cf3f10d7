// Package stream runs the watch streams that feed branch workers: one
// Stream per GitTarget and scope, fed by its source's shared informers
// (Informers), and barriers that say when a stream has handed on
// everything up to a resourceVersion.
//
// ConfigMaps and Secrets are informed on with a typed client in protobuf
// and cached typed (typed.go); everything else with the dynamic client.
// Locks: Informers.mu guards which informers run; each informer's mu
// guards which streams it feeds; each stream's queue has its own. None is
// held while a sink is called: every stream calls its sink from a
// goroutine of its own, and a sink may block that stream only.
// Informers.Decide may block on the source.
package stream
