package engine

import "mvkv/vfs"

type vfsOSType = vfs.OS
