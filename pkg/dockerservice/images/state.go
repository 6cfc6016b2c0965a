package images

import (
	"maps"
	"slices"
	"sync"
)

// presentImages remembers the images known to exist locally, by the
// reference their users gave, so that the pause image costs no Docker
// call per sandbox (ensure.go).
type presentImages struct {
	mu   sync.Mutex
	refs map[string]bool
}

func (p *presentImages) has(ref string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refs[ref]
}

func (p *presentImages) mark(refs ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refs == nil {
		p.refs = map[string]bool{}
	}
	for _, r := range refs {
		p.refs[r] = true
	}
}

func (p *presentImages) forget(ref string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.refs, ref)
}

// list returns the references remembered, sorted.
func (p *presentImages) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.refs))
}

// forgetIf forgets every reference gone reports true for; gone runs
// under the lock.
func (p *presentImages) forgetIf(gone func(ref string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ref := range p.refs {
		if gone(ref) {
			delete(p.refs, ref)
		}
	}
}

// cachedImage is what ImageInspect told of an image that ImageList does
// not, or tells differently (see ListImages): the configured User, the
// size, and the normalised references. listed is the references the list
// showed when the image was inspected: while the list still shows them,
// the inspect's are still current.
type cachedImage struct {
	user          string
	size          int64
	tags, digests []string
	listed        string
}

// userCache remembers what ImageInspect said of images, by ID. An image's
// config never changes under the same ID, nor do its layers for the
// node's platform; its references do, and the list shows when (see
// cachedImage.listed). Entries of images no longer listed are dropped.
type userCache struct {
	mu    sync.Mutex
	users map[string]cachedImage
}

func (c *userCache) get(id string) (cachedImage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.users[id]
	return u, ok
}

func (c *userCache) put(id string, img cachedImage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == nil {
		c.users = map[string]cachedImage{}
	}
	c.users[id] = img
}

// retain drops the entries whose ID is not in live.
func (c *userCache) retain(live map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.users {
		if !live[id] {
			delete(c.users, id)
		}
	}
}
