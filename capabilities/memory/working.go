package memory

import (
	"container/list"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
)

// record is one entry of any tier, in the host's own units (times in Unix
// nanoseconds, expires 0 = never).
type record struct {
	Tier     string          `json:"tier"`
	Seq      int64           `json:"seq,omitempty"`
	Key      string          `json:"key"`
	Content  json.RawMessage `json:"content"`
	Tags     []string        `json:"tags,omitempty"`
	Source   string          `json:"source,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Created  int64           `json:"created"`
	Updated  int64           `json:"updated"`
	Expires  int64           `json:"expires,omitempty"`
}

func (r *record) size() int { return len(r.Key) + len(r.Content) }

func (r *record) live(now int64) bool { return r.Expires == 0 || r.Expires > now }

// wkey addresses a working entry: the namespace of the memory_id it was
// stored through, and its key.
type wkey struct{ ns, key string }

type witem struct {
	k    wkey
	rec  record
	elem *list.Element
}

// workingStore is one session's working tier (docs/DECISIONS.md, State: session-scoped,
// in memory). The LRU list orders entries by last use, a read or a write;
// its front is the most recent.
type workingStore struct {
	mu    sync.Mutex
	items map[wkey]*witem
	lru   list.List
	bytes int
}

func newWorkingStore() *workingStore { return &workingStore{items: map[wkey]*witem{}} }

// Limits bound a working store; zero means unlimited.
type limits struct {
	maxEntries, maxBytes int
	evict                bool // full policy: evict LRU, or reject
}

// put upserts a batch. Under the reject policy a batch that would exceed
// the limits is refused whole; under the evict policy the least recently
// used entries not in the batch are evicted to make room. A batch that
// cannot fit even in an empty store is refused under both policies.
// Expired entries are dropped first: they are already invisible.
func (w *workingStore) put(ns string, recs []record, lim limits, now int64) (evicted int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.purgeLocked(now)
	over, err := w.checkLocked(ns, recs, lim)
	if err != nil {
		return 0, err
	}
	if over && !lim.evict {
		return 0, fmt.Errorf("working memory is full (limits %d entries, %d bytes; policy reject): %w", lim.maxEntries, lim.maxBytes, ErrWorkingFull)
	}
	for i := range recs {
		w.setLocked(wkey{ns, recs[i].Key}, recs[i])
	}
	for (lim.maxEntries > 0 && len(w.items) > lim.maxEntries) || (lim.maxBytes > 0 && w.bytes > lim.maxBytes) {
		// The batch's entries are at the front and fit alone, so the
		// back is always an older entry.
		it := w.lru.Back().Value.(*witem)
		w.removeLocked(it)
		evicted++
	}
	return evicted, nil
}

// fits reports, without writing, whether put would refuse the batch.
func (w *workingStore) fits(ns string, recs []record, lim limits, now int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.purgeLocked(now)
	over, err := w.checkLocked(ns, recs, lim)
	if err == nil && over && !lim.evict {
		err = fmt.Errorf("working memory is full (limits %d entries, %d bytes; policy reject): %w", lim.maxEntries, lim.maxBytes, ErrWorkingFull)
	}
	return err
}

// checkLocked refuses a batch that cannot fit even in an empty store, and
// reports whether the store would be over its limits after it.
func (w *workingStore) checkLocked(ns string, recs []record, lim limits) (over bool, err error) {
	// The batch's own footprint, last write of a key winning.
	final := map[string]int{}
	for i := range recs {
		final[recs[i].Key] = recs[i].size()
	}
	batchBytes := 0
	for _, n := range final {
		batchBytes += n
	}
	if lim.maxEntries > 0 && len(final) > lim.maxEntries {
		return false, fmt.Errorf("batch of %d working entries exceeds the limit of %d entries: %w", len(final), lim.maxEntries, ErrWorkingFull)
	}
	if lim.maxBytes > 0 && batchBytes > lim.maxBytes {
		return false, fmt.Errorf("batch of %d bytes exceeds the working limit of %d bytes: %w", batchBytes, lim.maxBytes, ErrWorkingFull)
	}
	count, bytes := len(w.items), w.bytes
	for key, n := range final {
		if old, ok := w.items[wkey{ns, key}]; ok {
			bytes -= old.rec.size()
		} else {
			count++
		}
		bytes += n
	}
	return (lim.maxEntries > 0 && count > lim.maxEntries) || (lim.maxBytes > 0 && bytes > lim.maxBytes), nil
}

func (w *workingStore) setLocked(k wkey, r record) {
	if old, ok := w.items[k]; ok {
		if old.rec.live(r.Updated) {
			r.Created = old.rec.Created
		}
		w.bytes += r.size() - old.rec.size()
		old.rec = r
		w.lru.MoveToFront(old.elem)
		return
	}
	it := &witem{k: k, rec: r}
	it.elem = w.lru.PushFront(it)
	w.items[k] = it
	w.bytes += r.size()
}

func (w *workingStore) removeLocked(it *witem) {
	w.lru.Remove(it.elem)
	delete(w.items, it.k)
	w.bytes -= it.rec.size()
}

// purgeLocked drops expired entries and returns how many.
func (w *workingStore) purgeLocked(now int64) int {
	n := 0
	for _, it := range w.items {
		if !it.rec.live(now) {
			w.removeLocked(it)
			n++
		}
	}
	return n
}

func (w *workingStore) purge(now int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.purgeLocked(now)
}

// get returns the live entries of keys; a read is a use (LRU).
func (w *workingStore) get(ns string, keys []string, now int64) []record {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []record
	for _, k := range keys {
		if it, ok := w.items[wkey{ns, k}]; ok && it.rec.live(now) {
			w.lru.MoveToFront(it.elem)
			out = append(out, it.rec)
		}
	}
	return out
}

// scored is a recall candidate with its score (docs/DECISIONS.md, Capability gaps users hit).
type scored struct {
	rec record
	raw float64
}

// search returns live entries of ns passing the filters; with a query,
// only those scoring above zero and at least its min_score, with their
// score.
func (w *workingStore) search(ns string, q *query, f filter, now int64) []scored {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []scored
	for k, it := range w.items {
		r := &it.rec
		if k.ns != ns || !r.live(now) || !f.match(r) {
			continue
		}
		rel := 0.0
		if q != nil {
			if rel = q.m.scoreEntry(r.Key, bodyText(r.Content), r.Tags); rel == 0 || rel < q.minScore {
				continue
			}
		}
		out = append(out, scored{rec: *r, raw: rel})
	}
	return out
}

// forget deletes live or expired entries of ns matching the selector.
func (w *workingStore) forget(ns string, sel selector) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := map[string]bool{}
	for _, k := range sel.keys {
		keys[k] = true
	}
	n := 0
	for k, it := range w.items {
		if k.ns != ns || (len(keys) > 0 && !keys[k.key]) || !hasAllTags(it.rec.Tags, sel.tags) ||
			(sel.updatedBefore != 0 && it.rec.Updated > sel.updatedBefore) {
			continue
		}
		w.removeLocked(it)
		n++
	}
	return n
}

// stats counts the live entries of ns.
func (w *workingStore) stats(ns string, now int64) (entries, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, it := range w.items {
		if k.ns == ns && it.rec.live(now) {
			entries++
			bytes += it.rec.size()
		}
	}
	return entries, bytes
}

// savedWorking is a working store in a snapshot: entries from least to most
// recently used, so a restore rebuilds the same LRU order.
type savedWorking struct {
	NS  string `json:"ns"`
	Rec record `json:"rec"`
}

func (w *workingStore) save() []savedWorking {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]savedWorking, 0, len(w.items))
	for e := w.lru.Back(); e != nil; e = e.Prev() {
		it := e.Value.(*witem)
		out = append(out, savedWorking{NS: it.k.ns, Rec: it.rec})
	}
	return out
}

func loadWorking(saved []savedWorking) *workingStore {
	w := newWorkingStore()
	for _, s := range saved {
		s.Rec.Tier = TierWorking
		w.setLocked(wkey{s.NS, s.Rec.Key}, s.Rec)
	}
	return w
}

// clone copies the store (the `snapshot` scope view, taken at spawn).
func (w *workingStore) clone() *workingStore { return loadWorking(w.save()) }

// filter is the recall filter on tags and creation time.
type filter struct {
	tags         []string
	since, until int64 // Unix nanos; 0 = open
}

func (f filter) match(r *record) bool {
	return hasAllTags(r.Tags, f.tags) && (f.since == 0 || r.Created >= f.since) && (f.until == 0 || r.Created <= f.until)
}

// selector is what memory/forget deletes: keys (any), tags (all), and
// entries last updated at or before updatedBefore.
type selector struct {
	keys          []string
	tags          []string
	updatedBefore int64
}

// sortByTime orders records by creation (then sequence) time.
func sortByTime(s []scored, newest bool) {
	sort.SliceStable(s, func(i, j int) bool {
		a, b := s[i].rec, s[j].rec
		if a.Created != b.Created {
			return (a.Created > b.Created) == newest
		}
		return (a.Seq > b.Seq) == newest
	})
}
