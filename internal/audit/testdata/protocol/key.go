package protocol

// KeyPattern is the bare-token syntax, as the manifest records it.
const KeyPattern = "[A-Za-z0-9_-]{1,64}"
