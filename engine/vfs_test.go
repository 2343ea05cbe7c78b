package engine

import "mvkv/internal/vfs"

type vfsOSType = vfs.OS
