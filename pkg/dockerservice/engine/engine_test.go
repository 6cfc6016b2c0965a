package engine

import "github.com/netshim/netshim/internal/fakedocker"

// The one fake engine speaks the whole of Client.
var _ Client = (*fakedocker.Engine)(nil)
