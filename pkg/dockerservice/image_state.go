package dockerservice

import (
	"sync"
)

// imageState is what the ImageService keeps between calls: the users of
// images by ID (for ListImages) and the image filesystem usage cache.
type imageState struct {
	users userCache
	fs    fsUsageCache
}

func (ds *DockerService) imageState() *imageState { return &ds.images }

// userCache remembers the configured User of images by ID. An image's
// config never changes under the same ID, so an entry is valid as long as
// the image exists; entries of images no longer listed are dropped.
type userCache struct {
	mu    sync.Mutex
	users map[string]string
}

func (c *userCache) get(id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.users[id]
	return u, ok
}

func (c *userCache) put(id, user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == nil {
		c.users = map[string]string{}
	}
	c.users[id] = user
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
