total 60
drwxr-xr-x 15 root root 4096 Dec  2 00:43 .
drwxr-xr-x  4 root root 4096 Dec  2 00:43 ..
dr-xr-xr-x  2 root root 4096 Dec  2 00:43 kernel.barrier.28fbae3d995ac4a7fbfb3eb9b37bf357
dr-xr-xr-x  2 root root 4096 Dec  2 00:43 kernel.combine.c512fd9a918c4dff49f813c8164c3bf0
