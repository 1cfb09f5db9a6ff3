// a placeholder: the audit digests this folder, it never runs the target
