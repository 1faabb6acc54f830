package chains

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/wire"
)

// GraphError is why a chain was refused before any node ran. It names the
// nodes concerned and wraps [wire.ErrInvalid], so it answers schema_violation.
type GraphError struct {
	Reason string
	Nodes  []string
}

func (e *GraphError) Error() string { return "chain graph: " + e.Reason }

func (e *GraphError) Unwrap() error { return wire.ErrInvalid }

func graphErr(nodes []string, format string, args ...any) *GraphError {
	return &GraphError{Reason: fmt.Sprintf(format, args...), Nodes: nodes}
}

// idPattern keeps node ids usable as one segment of a gjson path and of an
// expr member access (nodes.<id>.output).
var idPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// graph is a validated chain: nodes indexed by id with their edges, and
// compiled expressions.
type graph struct {
	nodes  []*node // definition order
	byID   map[string]*node
	output string
	// active counts the nodes that run in the flow (every node but fallbacks).
	active int
}

type node struct {
	def        msg.ChainNode
	in, out    []*edge
	policy     msg.ChainNodeOnError
	fallback   *node
	isFallback bool
	reqType    string // action, map: the canonical request type
	program    *vm.Program
}

type edge struct {
	from, to *node
	when     *bool
}

// compile validates def and builds its graph. Every check runs before any
// node does: references, kinds' settings, an entry, cycles.
func compile(def *msg.ChainDefinition, reg *wire.Registry) (*graph, error) {
	if def == nil || len(def.Nodes) == 0 {
		return nil, graphErr(nil, "a chain needs at least one node")
	}
	g := &graph{byID: make(map[string]*node, len(def.Nodes))}
	for i := range def.Nodes {
		d := def.Nodes[i]
		if !idPattern.MatchString(d.ID) {
			return nil, graphErr([]string{d.ID}, "node id %q: use letters, digits, _ and - and start with a letter or _", d.ID)
		}
		if _, dup := g.byID[d.ID]; dup {
			return nil, graphErr([]string{d.ID}, "node id %q is used twice", d.ID)
		}
		n := &node{def: d, policy: msg.ChainNodeOnErrorAbort}
		if d.OnError != nil {
			n.policy = *d.OnError
		}
		if err := n.compileSettings(reg); err != nil {
			return nil, err
		}
		g.byID[d.ID] = n
		g.nodes = append(g.nodes, n)
	}

	// References: edges, fallbacks and the output node must name nodes.
	var unknown []string
	for i, e := range def.Edges {
		from, okF := g.byID[e.From]
		to, okT := g.byID[e.To]
		if !okF {
			unknown = append(unknown, fmt.Sprintf("%s (edges[%d].from)", e.From, i))
		}
		if !okT {
			unknown = append(unknown, fmt.Sprintf("%s (edges[%d].to)", e.To, i))
		}
		if !okF || !okT {
			continue
		}
		ed := &edge{from: from, to: to, when: e.When}
		from.out = append(from.out, ed)
		to.in = append(to.in, ed)
	}
	for _, n := range g.nodes {
		if n.def.Fallback == nil {
			continue
		}
		f, ok := g.byID[*n.def.Fallback]
		if !ok {
			unknown = append(unknown, fmt.Sprintf("%s (fallback of %s)", *n.def.Fallback, n.def.ID))
			continue
		}
		n.fallback = f
	}
	if def.Output != nil {
		if _, ok := g.byID[*def.Output]; !ok {
			unknown = append(unknown, fmt.Sprintf("%s (output)", *def.Output))
		}
		g.output = *def.Output
	}
	if len(unknown) > 0 {
		return nil, graphErr(unknown, "unknown node referenced: %s", strings.Join(unknown, ", "))
	}

	owner := map[*node]*node{}
	for _, n := range g.nodes {
		if err := n.checkEdgesAndFallback(); err != nil {
			return nil, err
		}
		if f := n.fallback; f != nil {
			// One fallback per failed node: a shared one could be asked to
			// stand in for two nodes at once.
			if o, dup := owner[f]; dup {
				return nil, graphErr([]string{f.def.ID, o.def.ID, n.def.ID}, "node %q is the fallback of both %q and %q", f.def.ID, o.def.ID, n.def.ID)
			}
			owner[f] = n
			f.isFallback = true
		}
	}
	for _, n := range g.nodes {
		if !n.isFallback {
			g.active++
			continue
		}
		if len(n.in) > 0 || len(n.out) > 0 {
			return nil, graphErr([]string{n.def.ID}, "node %q is a fallback, so it may have no edges (it runs only in place of a failed node)", n.def.ID)
		}
		if n.policy == msg.ChainNodeOnErrorFallback {
			return nil, graphErr([]string{n.def.ID}, "fallback node %q may not have a fallback of its own", n.def.ID)
		}
		if g.output == n.def.ID {
			return nil, graphErr([]string{n.def.ID}, "output %q is a fallback node", n.def.ID)
		}
	}

	var roots []string
	for _, n := range g.nodes {
		if !n.isFallback && len(n.in) == 0 {
			roots = append(roots, n.def.ID)
		}
	}
	if len(roots) == 0 {
		ids := make([]string, 0, len(g.nodes))
		for _, n := range g.nodes {
			if !n.isFallback {
				ids = append(ids, n.def.ID)
			}
		}
		if cyc := g.findCycle(); cyc != nil {
			return nil, graphErr(cyc, "no entry node: every node has an incoming edge (cycle %s)", strings.Join(cyc, " → "))
		}
		return nil, graphErr(ids, "no entry node: every node has an incoming edge")
	}
	if cyc := g.findCycle(); cyc != nil {
		return nil, graphErr(cyc, "cycle %s", strings.Join(cyc, " → "))
	}
	return g, nil
}

// compileSettings checks the settings of the node's kind and compiles its
// expression, so a syntax error is refused before the chain starts.
func (n *node) compileSettings(reg *wire.Registry) error {
	d := &n.def
	id := d.ID
	need := func(ok bool, field string) error {
		if ok {
			return nil
		}
		return graphErr([]string{id}, "node %q (%s) needs %s", id, d.Kind, field)
	}
	var src string
	var opts []expr.Option
	switch d.Kind {
	case msg.ChainNodeKindAction, msg.ChainNodeKindMap:
		if err := need(d.Request != nil, "request"); err != nil {
			return err
		}
		if d.Kind == msg.ChainNodeKindMap {
			if err := need(d.Items != nil, "items"); err != nil {
				return err
			}
		}
		e := reg.Lookup(d.Request.Type)
		if e == nil {
			return graphErr([]string{id}, "node %q: unknown request type %q", id, d.Request.Type)
		}
		if e.Kind != wire.KindRequest || e.Kernel {
			return graphErr([]string{id}, "node %q: %s is not a request a chain can send", id, d.Request.Type)
		}
		n.reqType = e.Type
		if d.Request.Body != nil {
			if b := strings.TrimSpace(string(*d.Request.Body)); !strings.HasPrefix(b, "{") {
				return graphErr([]string{id}, "node %q: request.body must be an object", id)
			}
		}
	case msg.ChainNodeKindBranch:
		if err := need(d.Condition != nil && *d.Condition != "", "condition"); err != nil {
			return err
		}
		src, opts = *d.Condition, []expr.Option{expr.AsBool()}
	case msg.ChainNodeKindReduce:
		if err := need(d.Items != nil, "items"); err != nil {
			return err
		}
		if err := need(d.Expr != nil && *d.Expr != "", "expr"); err != nil {
			return err
		}
		src = *d.Expr
	case msg.ChainNodeKindGather:
	default:
		return graphErr([]string{id}, "node %q: unknown kind %q", id, d.Kind)
	}
	if src != "" {
		p, err := expr.Compile(src, opts...)
		if err != nil {
			return graphErr([]string{id}, "node %q: expression: %v", id, err)
		}
		n.program = p
	}
	if n.policy == msg.ChainNodeOnErrorFallback && d.Fallback == nil {
		return graphErr([]string{id}, "node %q: on_error fallback needs fallback", id)
	}
	if n.policy != msg.ChainNodeOnErrorFallback && d.Fallback != nil {
		return graphErr([]string{id}, "node %q: fallback is set but on_error is not fallback", id)
	}
	return nil
}

func (n *node) checkEdgesAndFallback() error {
	id := n.def.ID
	for _, e := range n.out {
		isBranch := n.def.Kind == msg.ChainNodeKindBranch
		if isBranch && e.when == nil {
			return graphErr([]string{id, e.to.def.ID}, "edge %s → %s leaves a branch, so it needs when (true or false)", id, e.to.def.ID)
		}
		if !isBranch && e.when != nil {
			return graphErr([]string{id, e.to.def.ID}, "edge %s → %s has when, but %s is not a branch", id, e.to.def.ID, id)
		}
	}
	if n.fallback == n {
		return graphErr([]string{id}, "node %q is its own fallback", id)
	}
	return nil
}

// findCycle returns the ids of one cycle, first node repeated at the end,
// or nil. Iterative colouring DFS, so a deep chain cannot exhaust the stack.
func (g *graph) findCycle() []string {
	const (
		white = iota
		grey
		black
	)
	colour := make(map[*node]int, len(g.nodes))
	parent := map[*node]*node{}
	type frame struct {
		n *node
		i int
	}
	for _, start := range g.nodes {
		if colour[start] != white {
			continue
		}
		stack := []frame{{n: start}}
		colour[start] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.i == len(top.n.out) {
				colour[top.n] = black
				stack = stack[:len(stack)-1]
				continue
			}
			next := top.n.out[top.i].to
			top.i++
			switch colour[next] {
			case white:
				colour[next] = grey
				parent[next] = top.n
				stack = append(stack, frame{n: next})
			case grey:
				// next is on the stack: walk back from top.n to it.
				cyc := []string{next.def.ID}
				for c := top.n; c != next; c = parent[c] {
					cyc = append(cyc, c.def.ID)
				}
				// Reverse into edge order and close the loop.
				for i, j := 1, len(cyc)-1; i < j; i, j = i+1, j-1 {
					cyc[i], cyc[j] = cyc[j], cyc[i]
				}
				return append(cyc, next.def.ID)
			}
		}
	}
	return nil
}

// sinks returns the ids of flow nodes without outgoing edges, in definition order.
func (g *graph) sinks() []string {
	var out []string
	for _, n := range g.nodes {
		if !n.isFallback && len(n.out) == 0 {
			out = append(out, n.def.ID)
		}
	}
	return out
}
