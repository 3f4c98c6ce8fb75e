/* api: the public ipcshim_* functions (include/ipcshim.h) and the
 * IPCSHIM_STATS exit report. */
#ifndef API_H
#define API_H

/* The IPCSHIM_STATS exit report (nothing unless IPCSHIM_STATS=1 and the
 * process used CUDA); run by init.c's exit report hook. */
void api_report_stats(void);

#endif
