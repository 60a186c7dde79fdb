module dratestbed.local/hostpathplugin

go 1.22
