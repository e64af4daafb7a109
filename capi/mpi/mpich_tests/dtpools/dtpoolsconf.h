/* Written by hand for ethbcast (DTPools' configure generates it): DTPools tests no define of
 * its own on Linux. */
