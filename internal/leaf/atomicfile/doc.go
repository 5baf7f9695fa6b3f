// Package atomicfile replaces small state files atomically, as node-local
// checkpoints need: a crash or power loss leaves the old content or the
// new one, never a mix or an empty file.
//
// [Write] writes a temporary file in the target's directory, syncs it,
// renames it over the target and syncs the directory, so that the rename
// itself is durable. The directory must exist; [Write] does not create it.
//
// [DecodeJSON] decodes exactly one JSON value strictly: unknown fields and
// trailing data are errors, so a checkpoint written by a newer or foreign
// writer is refused rather than half understood.
//
// Functions are safe for concurrent use on different paths; callers
// serialise writes to one path.
package atomicfile
