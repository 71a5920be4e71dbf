package cli

import "context"

// bg is the context of the calls not yet given their command's (to be
// replaced by e.ctx as the command line moves onto the library's walk).
var bg = context.Background()
