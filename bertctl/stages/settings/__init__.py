"""Every stage's settings, declared once: the classes (declared), the search stages' (search),
and the task stages' as the CLI shows them, the plug-ins' options added (assembled)."""
