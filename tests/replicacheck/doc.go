// Package replicacheck runs the durability check of inbox.New and inbox
// check against a real PostgreSQL primary and streaming standby
// (tests/internal/pgcluster). A primary whose commits wait for no standby
// gets a warning; a primary that waits for a standby that is gone gets
// another; a standby is refused as read-only. It has tests only.
package replicacheck
