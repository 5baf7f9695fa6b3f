package kube

import (
	"sync"
	"time"

	"github.com/dynmig/dynmig/placement"
)

// NodeBinds holds, per node, the MIG pod a scheduler is binding there
// now, from before its reservation is made until its binding settles: a
// node takes one MIG bind at a time, so that each decision for the node
// counts the reservation of the one before it. The extender's Bind and the
// framework plugin's binding cycle both keep one. It is safe for
// concurrent use; the zero value holds nothing.
type NodeBinds struct {
	mu     sync.RWMutex      // read-locked by Blocker, which a scheduler's parallel Filter calls
	byNode map[string]string // node -> UID
}

// Claim claims node for binding the pod uid and reports whether it did:
// when another pod holds node it returns that pod's UID and false. A pod
// may claim a node it already holds.
func (b *NodeBinds) Claim(node, uid string) (holder string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if who := b.byNode[node]; who != "" && who != uid {
		return who, false
	}
	if b.byNode == nil {
		b.byNode = map[string]string{}
	}
	b.byNode[node] = uid
	return uid, true
}

// Release releases node when the pod uid holds it, and does nothing
// otherwise.
func (b *NodeBinds) Release(node, uid string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byNode[node] == uid {
		delete(b.byNode, node)
	}
}

// Holder is what keeps a MIG pod off a node ([NodeBinds.Blocker]).
type Holder struct {
	// Binding is the UID of another pod being bound to the node now; ""
	// when Claim holds the node.
	Binding string
	// Claim is the node's claim that [Blocking] found.
	Claim NodeClaim
}

// String names the holding pod: "pod UID (being bound)", or the claim's
// namespace/name.
func (h Holder) String() string {
	if h.Binding != "" {
		return "pod " + h.Binding + " (being bound)"
	}
	return h.Claim.Pod.String()
}

// Blocker returns what keeps the pod uid, asking for req, off node, and
// whether anything does: another pod this scheduler is binding to node,
// else the claim [Blocking] finds among the node's claims (with now,
// timeout and stale as there).
func (b *NodeBinds) Blocker(node, uid string, req *placement.Request, claims []NodeClaim, now time.Time, timeout time.Duration, stale func(NodeClaim)) (Holder, bool) {
	b.mu.RLock()
	who := b.byNode[node]
	b.mu.RUnlock()
	if who != "" && who != uid {
		return Holder{Binding: who}, true
	}
	if c, ok := Blocking(claims, uid, req, now, timeout, stale); ok {
		return Holder{Claim: c}, true
	}
	return Holder{}, false
}
