package memory

import (
	"context"

	"github.com/aephost/aep/server"
)

// ChildSpawned sets the memory scope of a child session the kernel has just
// created (server.ChildObserver): the kernel calls it before the child can
// be reached, so the scope view is in place before its first request, and
// a refusal aborts the spawn. It is how the subagents capability's spawn
// reaches memory without naming this plugin.
func (p *Plugin) ChildSpawned(ctx context.Context, childID, parentID, memoryScope string) error {
	return p.SetScope(childID, parentID, memoryScope)
}

var _ server.ChildObserver = (*Plugin)(nil)
