package dockerservice

import (
	"sync"
)

// imageState is what the ImageService keeps between calls: what
// ListImages needs of images beyond Docker's list, by ID, and the image
// filesystem usage cache.
type imageState struct {
	users userCache
	fs    fsUsageCache
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

func (ds *DockerService) imageState() *imageState { return &ds.images }

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
