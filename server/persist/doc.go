// Package persist keeps what outlives a session's connection: snapshots
// (spec §1.6) and their restore, forks, sessions that move between hosts,
// automatic snapshots, recorded trajectories, and the session directories
// those copy, archive, pin and remove.
//
// The kernel (package server) holds sessions, decoding, the gate,
// dispatch and audit; it reaches this package only through its
// persistence interface (server/persistence.go), and this package reaches
// the kernel only through [Kernel] and [Session], which the kernel
// implements. It imports no kernel package, so the dependency runs one
// way: server → server/persist.
//
// Files, by what they hold:
//
//   - kernel.go: the contract with the kernel, and the interfaces plugins
//     implement to take part ([Snapshotter], [Forker], [FileHolder],
//     [SecretHolder]);
//   - keeper.go: the [Keeper], its settings and its lifecycle;
//   - dirs.go: session directories — where they live, the copy a
//     snapshot-scoped subagent starts from, pins, removal;
//   - snapshot.go, restore.go: taking and restoring a snapshot, and the
//     stored document;
//   - archive.go, stage.go: the files a sql snapshot carries, archived,
//     extracted and put in place;
//   - stored.go: owner keys and lineage, listing, deleting, retention;
//   - fork.go, clone.go: session/fork and its copy-on-write clones;
//   - autosnap.go, drain.go: automatic snapshots and a drain's snapshots,
//     what lets a session move to another host;
//   - trajectory.go, trajexport.go: recorded trajectories with their
//     lineage, their export, and chat samples with rewards from feedback;
//   - episodes.go: whole episodes of forks (a fork, a group, a tree), and
//     who may read them by lineage;
//   - handlers.go: the session namespace's persistence requests.
package persist
